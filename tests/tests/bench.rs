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
    let out = Command::new(binary("hero-bench"))
        .args(["--json", "--jobs", "400", "--batch", "20", "--rate", "200"])
        .args(["--duration", "1s", "--rounds", "1", "--recovery-jobs", "10"])
        .arg("--out")
        .arg(&out_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hero-bench failed: {stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    for scenario in [
        "submit-bulk",
        "worker-concurrent",
        "end-to-end",
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
    for scenario in ["submit-bulk", "worker-concurrent", "end-to-end"] {
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
    let _ = std::fs::remove_dir_all(&dir);
}
