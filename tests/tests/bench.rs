//! The benchmark (`hero-bench`) cannot rot: a short run of every scenario (small sizes, no peer) must finish,
//! print its table and write a JSON report with a figure for each scenario. The figures
//! themselves are not judged here; performance targets live in the full run (benches/run).

use std::process::Command;

use hero_testkit::binary;

#[test]
fn a_short_bench_run_reports_every_scenario() {
    let dir = std::env::temp_dir().join(format!("hero-bench-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out_file = dir.join("bench.json");
    let trace_file = dir.join("trace.txt");
    let out = Command::new(binary("hero-bench"))
        .args(["--json", "--jobs", "400", "--batch", "20", "--rate", "200"])
        .args(["--duration", "1s", "--rounds", "1", "--recovery-jobs", "10"])
        .arg("--out")
        .arg(&out_file)
        .arg("--latency-trace")
        .arg(&trace_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hero-bench failed: {stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    for scenario in [
        "submit-bulk",
        "worker-concurrent",
        "end-to-end",
        "end-to-end-features",
        "latency",
        "recovery",
        "memory",
    ] {
        assert!(
            table.contains(scenario),
            "{scenario} missing from:\n{table}"
        );
        assert!(
            stderr.contains(&format!("{scenario} ours")),
            "no progress line for {scenario}"
        );
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    let figure = |scenario: &str, metric: &str| -> f64 {
        report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["scenario"] == scenario && r["metric"] == metric)
            .and_then(|r| r["ours"].as_f64())
            .unwrap_or_else(|| panic!("no {scenario} {metric} in the report"))
    };
    for scenario in [
        "submit-bulk",
        "worker-concurrent",
        "end-to-end",
        "end-to-end-features",
    ] {
        assert!(figure(scenario, "jobs_per_s") > 0.0);
        assert!(figure(scenario, "redis_us_per_job") > 0.0);
    }
    assert!(figure("end-to-end", "start_p99_ms") >= figure("end-to-end", "start_p50_ms"));
    assert!(figure("latency", "result_p50_ms") > 0.0);
    let recovery = figure("recovery", "recovery_s");
    assert!(
        recovery > 0.0 && recovery < 30.0,
        "recovery took {recovery} s"
    );
    assert!(figure("memory", "bytes_per_waiting_job") > 0.0);
    assert!(report["rows"][0]["peer"].is_null(), "no peer was asked for");
    assert_eq!(
        report["peers"],
        serde_json::json!([]),
        "no peer was asked for"
    );
    // --latency-trace: a line per job of the latency scenario (200 offered), each made before
    // its submit was answered and before it started
    let trace = std::fs::read_to_string(&trace_file).unwrap();
    let jobs: Vec<Vec<u64>> = trace
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(' ').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(jobs.len(), 200, "{trace}");
    assert!(jobs
        .iter()
        .all(|j| j.len() == 3 && j[0] <= j[1] && j[0] <= j[2]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The short chaos soak (`benches/chaos --short`; `benches/chaos` runs the full one): one fault
/// of every kind in each phase (single server behind the fault proxy, Sentinel, cluster), every
/// acknowledged job judged against the workers' own ledger; the audit clean and memory back.
/// The binary exits 1 when a check fails; the JSON names the figures.
#[test]
fn a_short_chaos_soak_of_every_fault_kind_loses_nothing_and_records_nothing_twice() {
    let dir = std::env::temp_dir().join(format!("hero-chaos-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out_file = dir.join("chaos.json");
    let out = Command::new(binary("hero-bench"))
        .args(["chaos", "--short", "--rate", "300"])
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the chaos soak failed:\n{table}\n{stderr}"
    );
    assert!(
        table.trim_end().ends_with("lost 0, recorded twice 0"),
        "{table}"
    );
    let fig: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let kinds: Vec<(String, String)> = fig["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["faults"].as_u64() >= Some(1))
        .map(|k| {
            (
                k["topology"].as_str().unwrap().into(),
                k["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    for (phase, kind) in [
        ("single", "worker SIGKILL"),
        ("single", "worker SIGSTOP past its lease"),
        ("single", "broker SIGKILL and restart"),
        ("single", "Redis SIGKILL and restart"),
        ("single", "connections cut"),
        ("single", "connections half-open"),
        ("single", "latency 50-500 ms"),
        ("single", "bandwidth 8-64 KiB/s"),
        ("sentinel", "SENTINEL FAILOVER"),
        ("sentinel", "primary SIGKILL (failover)"),
        ("cluster", "primary SIGKILL (failover)"),
    ] {
        assert!(
            kinds.contains(&(phase.to_string(), kind.to_string())),
            "{phase}: {kind} was thrown: {fig}"
        );
    }
    for p in fig["phases"].as_array().unwrap() {
        assert!(p["jobs"].as_u64() > Some(100), "{p}");
        assert!(
            p["handler_runs"].as_u64() >= p["jobs"].as_u64(),
            "the ledger saw every run: {p}"
        );
        assert_eq!(p["audit_clean"], true, "{p}");
    }
    assert_eq!(
        (&fig["lost"], &fig["recorded_twice"]),
        (&0.into(), &0.into()),
        "{fig}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The scale-out run (`hero-bench --namespaces N`) cannot rot: on its own 3-master cluster, 1
/// and 2 namespaces on different shards run end to end and report their figures.
#[test]
fn a_short_scale_out_run_reports_each_namespace_count() {
    let dir = std::env::temp_dir().join(format!("hero-scale-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out_file = dir.join("scale.json");
    let out = Command::new(binary("hero-bench"))
        .args(["--json", "--namespaces", "2", "--jobs", "500"])
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "hero-bench --namespaces failed: {stderr}"
    );
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let rows = rows.as_array().expect("one row per namespace count");
    assert_eq!(rows.len(), 2);
    for (n, row) in rows.iter().enumerate() {
        assert_eq!(row["namespaces"], n + 1);
        assert_eq!(row["jobs"], 500 * (n as u64 + 1));
        assert_eq!(
            row["redis_cpu_us_per_job"].as_array().map(Vec::len),
            Some(n + 1)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hero-bench --only sharded` (one queue over K shards of a local cluster, each redis-server
/// CPU-capped): a short run at 1 and 2 shards reports each K's rows.
#[test]
fn a_short_sharded_run_reports_each_shard_count() {
    let dir = std::env::temp_dir().join(format!("hero-sharded-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out_file = dir.join("sharded.json");
    let out = Command::new(binary("hero-bench"))
        .args([
            "--json",
            "--only",
            "sharded",
            "--shards",
            "1,2",
            "--shard-cpu",
            "50",
        ])
        .args(["--jobs", "500", "--rounds", "1", "--out"])
        .arg(&out_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "hero-bench --only sharded failed: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for row in [
        "sharded-1  jobs/s",
        "sharded-2  Redis CPU µs/job",
        "sharded-2  client CPU µs/job",
    ] {
        assert!(stdout.contains(row), "{row} in {stdout}");
    }
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    let rows = rows.as_array().expect("one row per shard count");
    assert_eq!(rows.len(), 2);
    for (n, row) in rows.iter().enumerate() {
        assert_eq!(row["shards"], n + 1);
        assert_eq!(row["jobs"], 500 * (n as u64 + 1));
        assert!(row["jobs_per_sec"].as_f64().unwrap() > 0.0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--peer apalis` without the apalis peer's program says where it looked and how to build it,
/// before it starts anything.
#[test]
fn a_peer_that_is_not_built_is_named_with_how_to_build_it() {
    let out = Command::new(binary("hero-bench"))
        .args([
            "--peer",
            "apalis-nolock",
            "--only",
            "end-to-end",
            "--rounds",
            "1",
        ])
        .args(["--apalis-bin", "/nonexistent/hero-bench-apalis"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/hero-bench-apalis")
            && stderr.contains("benches/apalis/Cargo.toml"),
        "{stderr}"
    );
}
