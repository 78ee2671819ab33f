//! `hero`: parse the command line, run the command, map errors to a message and exit code 2.

use clap::Parser;

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,hero_broker=info,hero_worker=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = hero_broker::cli::Cli::parse();
    match hero_broker::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}
