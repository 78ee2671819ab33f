//! `hero-bench`: the benchmark of SPEC §9, out of the product binary. It measures hero beside a
//! peer (BullMQ) on one throwaway Redis; `benches/run` is the full run. The hidden `worker`
//! subcommand is the worker process the recovery scenario kills.
//!
//! # Layout
//! - `bench`: arguments, pinning, the Redis probe, the round loop.
//! - `ours`: hero's side of each scenario, through the public client and worker API.
//! - `peer`: the BullMQ side (`benches/peer/bullmq.mjs` under Node).
//! - `report`: figures, medians, the table and the JSON report.
//! - `tally`: what a bench worker saw (latencies; the `--latency-trace` file).
//! - `chaos`: the chaos soak.
//! - `scale`: `--namespaces N`, scale-out over the shards of a Redis Cluster.
//! - `sharded`: `--only sharded`, one queue over K shards, each redis-server CPU-capped.
//! - `watch`: the `wait` and `events` scenarios (waits and subscriptions).
//! - `fair`: `--only fair`, fair share within a queue on and off.

mod bench;
mod ceiling;
mod chaos;
mod fair;
mod ours;
mod peer;
mod probe;
mod report;
mod scale;
mod scenario;
mod sharded;
mod tally;
mod watch;

use clap::{Parser, Subcommand};

// glibc's malloc showed as a tenth of the worker's CPU in profiles; mimalloc halves that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "hero-bench",
    version,
    about = "Benchmark hero (and a peer, with --peer bullmq) on a throwaway Redis",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Also write the report as JSON (to --out).
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    bench: scenario::BenchArgs,
    #[command(subcommand)]
    child: Option<Child>,
}

#[derive(Subcommand, Debug)]
enum Child {
    /// The chaos soak (`benches/chaos`): faults injected into a real system under load, then
    /// every job checked.
    Chaos(chaos::ChaosArgs),
    /// The worker process the recovery scenario and the chaos soak kill.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        redis_url: String,
        #[command(flatten)]
        args: ours::BenchWorkerArgs,
    },
}

fn main() {
    // as the hero binary does (see hero_protocol::process); the recovery and chaos workers and
    // the Redis it starts inherit it (Redis turns THP off for itself anyway)
    hero_protocol::process::disable_transparent_huge_pages();
    let cli = Cli::parse();
    // the benchmark prints its own progress; every worker start and stop would drown it
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // One thread, like the single-threaded peer it is compared with; it pins itself to a core.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    let result = runtime.block_on(async {
        match cli.child {
            Some(Child::Worker { redis_url, args }) => {
                let mut opts = hero_client::ClientOptions::new(redis_url);
                opts.replicas.wanted = args.min_replicas;
                opts.replicas.timeout = std::time::Duration::from_millis(args.replica_timeout_ms);
                let client = hero_client::Client::with_options(opts).await?;
                ours::bench_worker(client, &args).await
            }
            Some(Child::Chaos(args)) => chaos::run(&args).await,
            None if cli.bench.namespaces > 0 => scale::run(&cli.bench, cli.json).await,
            None if cli.bench.only.contains(&scenario::Scenario::Fair) => {
                fair::run(&cli.bench, cli.json).await
            }
            None if cli.bench.only.contains(&scenario::Scenario::Sharded) => {
                sharded::run(&cli.bench, cli.json).await
            }
            None => bench::run(cli.bench, cli.json).await,
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}
