//! `hero`: parse the command line, run the command, map errors to a message and exit code 2.

// glibc's malloc showed as a tenth of the worker's CPU in profiles; mimalloc halves that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // before the runtime's first allocations: see hero_protocol::process
    hero_protocol::process::disable_transparent_huge_pages();
    // `hero queues | head`: a command whose reader went away ends as every Unix tool does, by
    // SIGPIPE (status 141 in a shell), not with a panic at the next print. Help and parse errors
    // are printed under that rule too.
    sigpipe(libc::SIG_DFL);
    let cli = match hero_broker::cli::file::parse(std::env::args_os().collect()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if cli.command.is_service() {
        // a service writes to sockets and children's pipes, where a peer gone is an error to
        // handle, never a reason to die; and it prints nothing anyone pipes into `head`
        sigpipe(libc::SIG_IGN);
    }
    let telemetry = match hero_broker::telemetry::init(cli.global.otlp.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(2);
        }
    };
    let code = match runtime.block_on(hero_broker::cli::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    // exit skips destructors: flush the spans first
    drop(telemetry);
    std::process::exit(code);
}

/// Sets what SIGPIPE does to this process (Rust starts every program with it ignored).
fn sigpipe(action: libc::sighandler_t) {
    // SAFETY: SIG_DFL and SIG_IGN are valid dispositions; no handler function is installed
    unsafe {
        libc::signal(libc::SIGPIPE, action);
    }
}
