//! The one cron engine (`lib/cron_engine.lua` in the function library, reached through
//! `hero_cron_next`) held to what computed the ticks in Rust before it: croner 3.0.1 read in
//! chrono-tz's zones. Every grammar feature in zones of both hemispheres, half-hour and
//! quarter-hour offsets, with and without daylight time, ticks compared with croner's from
//! several instants of 2026-2028 (ticks within 3 h of a DST change aside: croner errs there,
//! and the explicit tests below pin our semantics); the same expressions accepted and refused;
//! DST changes, `L`, `W`, `#`, `5L`, `LW` against instants worked out by hand; every refusal
//! saying what is wrong; a schedule that never fires costing next to nothing.

use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{Offset, TimeZone, Utc};
use chrono_tz::Tz;
use hero_protocol::Error;
use hero_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

async fn engine() -> (RedisServer, MultiplexedConnection) {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    hero_protocol::function::ensure_loaded(&mut conn)
        .await
        .unwrap();
    (server, conn)
}

/// The engine's next `n` ticks of `schedule` in `tz` strictly after `after` (ms).
async fn ticks(
    conn: &mut MultiplexedConnection,
    schedule: &str,
    tz: &str,
    after: u64,
    n: u32,
) -> Result<Vec<u64>, Error> {
    let call = hero_protocol::function::cron_next(schedule, tz, after, n);
    let r: redis::RedisResult<Vec<u64>> = call.query_async(conn).await;
    r.map_err(Error::from)
}

/// ms since the epoch of a UTC time.
fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0)
        .unwrap()
        .timestamp_millis() as u64
}

fn shown(ms: &[u64]) -> Vec<String> {
    ms.iter()
        .map(|&t| {
            Utc.timestamp_millis_opt(t as i64)
                .unwrap()
                .format("%Y-%m-%d %H:%M:%SZ")
                .to_string()
        })
        .collect()
}

async fn expect(
    conn: &mut MultiplexedConnection,
    schedule: &str,
    tz: &str,
    after: u64,
    want: &[u64],
) {
    let got = ticks(conn, schedule, tz, after, want.len() as u32)
        .await
        .unwrap_or_else(|e| panic!("{schedule} in {tz}: {e}"));
    assert_eq!(
        shown(&got),
        shown(want),
        "{schedule} in {tz} after {:?}",
        shown(&[after])
    );
}

const ZONES: [&str; 9] = [
    "UTC",
    "Europe/Amsterdam",
    "America/New_York",
    "Australia/Sydney",
    "Asia/Kolkata",
    "America/St_Johns",
    "Pacific/Chatham",
    "Asia/Tehran",
    "Pacific/Kiritimati",
];

/// Every grammar feature croner takes, `|` between them (`LW` and `7L` aside: croner refuses
/// the one and never fires the other; they are checked by hand below).
const EXPRESSIONS: &str = "\
* * * * * | */15 * * * * | */30 * * * * | 0 * * * * | 30 2 * * * | 0 2 * * * | 0 1-3 * * * |
*/10 * * * * * | */20 * 1 * * * | 15,45 */2 * * * | 10-40/5 1-3 * * * | 5/10 * * * * |
30 */7 * * * | 0 9-17 * * MON-FRI | 0 22 * * 1-5 | 0 0 1,15 * * | 0 12 * JAN,JUL * |
0 0 1 */3 * | 0 0 * feb-mar mon | 0 0 * * SUN | 0 0 * * 7 | 0 0 * * 0,6 | 0 0 * * sat-sun |
0 0 * * MON-SUN | 45 23 * * 6 | 0 0 L * * | 0 0 L,15 * * | 0 0 15W * * | 0 0 1W * * |
0 0 31W * * | 0 0 * * 5L | 0 0 * * 5#3 | 0 0 * * 1#1,5#L | 0 0 * * 1-5#2 | 0 0 13 * 5 |
0 0 13 * +5 | 0 0 1-7 * 1 | 0 0 1-7 * +1 | 0 0 */1 * 1 | 0 0 ? * ? | 0 30 1 * * ? |
0 15 2 * * 0 | 0 0 0 29 2 * | 59 59 23 31 12 * | 0 0 12 * * * 2027 |
0 0 12 1 * * 2026-2028/2 | 0 0 6 * * 1 */3,2028 | @yearly | @annually | @monthly | @weekly |
@daily | @hourly";

fn expressions() -> Vec<&'static str> {
    EXPRESSIONS.split('|').map(str::trim).collect()
}

/// Whether the zone's offset 3 h before `ms` differs from 3 h after: a tick near a DST change.
fn near_change(zone: Tz, ms: i64) -> bool {
    let at = |t: i64| {
        zone.timestamp_millis_opt(t)
            .unwrap()
            .offset()
            .fix()
            .local_minus_utc()
    };
    at(ms - 3 * 3_600_000) != at(ms + 3 * 3_600_000)
}

/// croner's successive ticks after `after` up to `until` (at most 200).
fn croner_ticks(cron: &croner::Cron, zone: Tz, after: i64, until: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut at = after;
    while out.len() < 200 {
        let start = zone.timestamp_millis_opt(at).single().unwrap();
        let Ok(next) = cron.find_next_occurrence(&start, false) else {
            break;
        };
        let t = next.timestamp_millis();
        if t > until {
            break;
        }
        out.push(t);
        // in an overlap croner may answer a tick that is not after its start
        at = t.max(at + 1000);
    }
    out
}

#[tokio::test]
async fn the_engine_gives_croners_ticks_in_every_zone_away_from_dst_changes() {
    let (_server, mut conn) = engine().await;
    let starts = [
        utc(2026, 1, 1, 0, 0),
        utc(2026, 3, 29, 0, 0),
        utc(2027, 3, 28, 0, 0) + 17_000,
        utc(2027, 10, 30, 12, 34),
        utc(2028, 2, 28, 23, 59),
    ];
    let (mut compared, mut mismatches, mut cases) = (0usize, Vec::new(), 0usize);
    for expr in expressions() {
        let cron = croner::Cron::from_str(expr).unwrap_or_else(|e| panic!("croner: {expr}: {e}"));
        for name in ZONES {
            let zone: Tz = name.parse().unwrap();
            for &after in &starts {
                cases += 1;
                let ours = ticks(&mut conn, expr, name, after, 30)
                    .await
                    .unwrap_or_else(|e| panic!("{expr} in {name}: {e}"));
                assert!(
                    ours.windows(2).all(|w| w[0] < w[1]),
                    "{expr} in {name}: in order"
                );
                assert!(ours.first().is_none_or(|&t| t > after));
                let until = if ours.len() == 30 {
                    ours[29] as i64
                } else {
                    i64::MAX
                };
                let theirs = croner_ticks(&cron, zone, after as i64, until);
                let keep = |t: &i64| !near_change(zone, *t);
                let a: Vec<i64> = ours.iter().map(|&t| t as i64).filter(keep).collect();
                let b: Vec<i64> = theirs.into_iter().filter(keep).collect();
                compared += a.len();
                if a != b {
                    let to_u = |v: &[i64]| v.iter().take(6).map(|&t| t as u64).collect::<Vec<_>>();
                    mismatches.push(format!(
                        "{expr} in {name} after {:?}: ours {:?} croner {:?}",
                        shown(&[after]),
                        shown(&to_u(&a)),
                        shown(&to_u(&b))
                    ));
                }
            }
        }
    }
    println!(
        "{} expressions x {} zones x {} starts ({cases} cases): {compared} ticks compared with \
         croner, {} mismatching",
        expressions().len(),
        ZONES.len(),
        starts.len(),
        mismatches.len()
    );
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    assert!(compared > 50_000, "only {compared} ticks compared");
}

/// What croner accepts and refuses, the engine does (`LW`, which croner refuses, the engine
/// takes as the month's last weekday).
#[tokio::test]
async fn the_engine_accepts_what_croner_accepts_and_refuses_what_it_refuses() {
    let (_server, mut conn) = engine().await;
    let listed = "\
* * * * | * * * * * * * * | 60 * * * * | * 24 * * * | * * 0 * * | * * 32 * * |
* * * 13 * | * * * 0 * | * * * * 8 | * * * * * * 0 | * * * * * * 5001 | * * * * * * 1999 |
*/0 * * * * | 5-1 * * * * | 1-2-3 * * * * | 1/2/3 * * * * | *,5 * * * * | 1, * * * * |
, * * * * | ? * * * * | * ? * * * | * * ? * * | * * * ? * | * * * * ? | 0 0 5L * * |
0 0 * * L | 0 0 * * 5#L | 0 0 * * 5#3L | 0 0 * * 5#0 | 0 0 * * 5#6 | 0 0 * * 5#256 |
0 0 * * 5# | 0 0 * * #3 | 0 0 * * L5 | 0 0 * * LL | 0 0 * * 5LL | 0 0 15w * * |
0 0 0W * * | 0 0 32W * * | 0 0 W * * | 0 0 15W3 * * | 0 0 1-5W * * | 0 0 * * 1W |
0 0 1#2 * * | 0 0 * * */2#3 | 0 0 * * 1-5/2 | 0 0 * * ++1 | 0 0 1 * +* | 0 0 1 * 1+ |
0 0 * JAN-DEC * | 0 0 * JANUARY * | 0 0 * * SUNDAY | 0 0 * MON * | @YEARLY | @reboot |
@every 5m | @weekly * |  @daily  | 0 0 * * 0-7 | 0 0 * * 7-7 | 0 0 * * 7#2 |
5/65535 * * * * | 0/65535 * * * * | 0 0 0 * * * 1/65000 | 0 0 0 * * * 2000/65000 |
00005 * * * * | 65536 * * * * | 1 2 3 4 5 6 7 | * * * * * -1 | -1 * * * * | 1- * * * * |
*/5/ * * * * | /5 * * * * | 5/ * * * * | *-5 * * * * | */5-10 * * * * | 1-5/0 * * * * |
0 0 L-5 * * | 0 0 * * 5#2,1L,0";
    let mut grammar: Vec<&str> = listed.split('|').map(str::trim).collect();
    grammar.extend(["*\t*\t*\t*\t*", "", "   ", " @daily "]);
    for expr in grammar {
        let croner_takes = croner::Cron::from_str(expr).is_ok();
        let ours = ticks(&mut conn, expr, "UTC", utc(2027, 1, 1, 0, 0), 2).await;
        match (&ours, croner_takes) {
            (Ok(_), true) | (Err(Error::InvalidInput(_)), false) => {}
            _ => panic!("{expr:?}: croner {croner_takes}, the engine {ours:?}"),
        }
    }
    assert!(croner::Cron::from_str("0 0 LW * *").is_err());
    assert!(ticks(&mut conn, "0 0 LW * *", "UTC", 0, 1).await.is_ok());
}

#[tokio::test]
async fn dst_changes_fire_fixed_times_once_and_other_schedules_at_every_instant() {
    let (_server, mut conn) = engine().await;
    let c = &mut conn;
    // Amsterdam, 2027-03-28 01:00Z: 02:00 CET becomes 03:00 CEST; 02:30 fires at 03:00 CEST
    let ams = "Europe/Amsterdam";
    let want = [
        utc(2027, 3, 27, 1, 30),
        utc(2027, 3, 28, 1, 0),
        utc(2027, 3, 29, 0, 30),
    ];
    expect(c, "30 2 * * *", ams, utc(2027, 3, 27, 0, 0), &want).await;
    let want = [
        utc(2027, 3, 28, 0, 0),
        utc(2027, 3, 28, 0, 30),
        utc(2027, 3, 28, 1, 0),
        utc(2027, 3, 28, 1, 30),
    ];
    expect(c, "*/30 * * * *", ams, utc(2027, 3, 27, 23, 59), &want).await;
    let want = [
        utc(2027, 3, 27, 23, 0),
        utc(2027, 3, 28, 0, 0),
        utc(2027, 3, 28, 1, 0),
        utc(2027, 3, 28, 2, 0),
    ];
    expect(c, "0 * * * *", ams, utc(2027, 3, 27, 22, 30), &want).await;
    // 2027-10-31 01:00Z: 03:00 CEST becomes 02:00 CET; 02:00-03:00 happens twice
    let want = [
        utc(2027, 10, 30, 0, 30),
        utc(2027, 10, 31, 0, 30),
        utc(2027, 11, 1, 1, 30),
    ];
    expect(c, "30 2 * * *", ams, utc(2027, 10, 30, 0, 0), &want).await;
    let want = [
        utc(2027, 10, 31, 0, 0),
        utc(2027, 10, 31, 0, 30),
        utc(2027, 10, 31, 1, 0),
        utc(2027, 10, 31, 1, 30),
        utc(2027, 10, 31, 2, 0),
    ];
    expect(c, "*/30 * * * *", ams, utc(2027, 10, 30, 23, 45), &want).await;
    let want = [
        utc(2027, 10, 30, 23, 0),
        utc(2027, 10, 31, 0, 0),
        utc(2027, 10, 31, 1, 0),
        utc(2027, 10, 31, 2, 0),
    ];
    expect(c, "0 * * * *", ams, utc(2027, 10, 30, 22, 30), &want).await;

    // New York: 2027-11-07 06:00Z, 02:00 EDT becomes 01:00 EST; 2027-03-14 07:00Z, 02:00 EST
    // becomes 03:00 EDT
    let ny = "America/New_York";
    let want = [
        utc(2027, 11, 6, 5, 30),
        utc(2027, 11, 7, 5, 30),
        utc(2027, 11, 8, 6, 30),
    ];
    expect(c, "30 1 * * *", ny, utc(2027, 11, 6, 0, 0), &want).await;
    // from inside the second 01:00-02:00, the fixed time has had its one tick that day
    expect(
        c,
        "30 1 * * *",
        ny,
        utc(2027, 11, 7, 6, 10),
        &[utc(2027, 11, 8, 6, 30)],
    )
    .await;
    let want = [
        utc(2027, 11, 7, 6, 0),
        utc(2027, 11, 7, 6, 30),
        utc(2027, 11, 7, 7, 0),
    ];
    expect(c, "*/30 * * * *", ny, utc(2027, 11, 7, 5, 40), &want).await;
    let want = [
        utc(2027, 3, 13, 7, 0),
        utc(2027, 3, 14, 7, 0),
        utc(2027, 3, 15, 6, 0),
    ];
    expect(c, "0 2 * * *", ny, utc(2027, 3, 13, 0, 0), &want).await;

    // Sydney: 2027-04-03 16:00Z, 03:00 AEDT becomes 02:00 AEST; 2027-10-02 16:00Z, 02:00
    // AEST becomes 03:00 AEDT
    let syd = "Australia/Sydney";
    let want = [
        utc(2027, 4, 2, 15, 30),
        utc(2027, 4, 3, 15, 30),
        utc(2027, 4, 4, 16, 30),
    ];
    expect(c, "30 2 * * *", syd, utc(2027, 4, 2, 0, 0), &want).await;
    let want = [
        utc(2027, 4, 3, 15, 0),
        utc(2027, 4, 3, 15, 30),
        utc(2027, 4, 3, 16, 0),
        utc(2027, 4, 3, 16, 30),
        utc(2027, 4, 3, 17, 0),
    ];
    expect(c, "*/30 * * * *", syd, utc(2027, 4, 3, 14, 45), &want).await;
    let want = [
        utc(2027, 10, 1, 16, 30),
        utc(2027, 10, 2, 16, 0),
        utc(2027, 10, 3, 15, 30),
    ];
    expect(c, "30 2 * * *", syd, utc(2027, 10, 1, 0, 0), &want).await;

    // Chatham (+12:45, +13:45 in summer) springs forward at 02:45 local, 2027-09-25 14:00Z
    let want = [
        utc(2027, 9, 24, 14, 15),
        utc(2027, 9, 25, 14, 0),
        utc(2027, 9, 26, 13, 15),
    ];
    expect(
        c,
        "0 3 * * *",
        "Pacific/Chatham",
        utc(2027, 9, 24, 0, 0),
        &want,
    )
    .await;
    // Dublin's rule names its summer time standard (IST-1GMT0: negative DST); the same
    // semantics: 2027-03-28 01:00Z springs forward, 2027-10-31 01:00Z falls back
    let dub = "Europe/Dublin";
    let want = [
        utc(2027, 3, 27, 1, 30),
        utc(2027, 3, 28, 1, 0),
        utc(2027, 3, 29, 0, 30),
    ];
    expect(c, "30 1 * * *", dub, utc(2027, 3, 27, 0, 0), &want).await;
    let want = [
        utc(2027, 10, 30, 0, 30),
        utc(2027, 10, 31, 0, 30),
        utc(2027, 11, 1, 1, 30),
    ];
    expect(c, "30 1 * * *", dub, utc(2027, 10, 30, 0, 0), &want).await;
}

/// `L`, `LW`, `nW`, `#`, `nL` against the 2027 calendar, worked out by hand.
#[tokio::test]
async fn last_nearest_and_nth_days_fall_on_the_2027_calendar() {
    let (_server, mut conn) = engine().await;
    let start = utc(2027, 1, 1, 0, 0) - 1000;
    // the day of each month of 2027 (0: none that month)
    let cases: [(&str, [u32; 12]); 9] = [
        (
            "0 0 L * *",
            [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31],
        ),
        (
            "0 0 LW * *",
            [29, 26, 31, 30, 31, 30, 30, 31, 30, 29, 30, 31],
        ),
        (
            "0 0 15W * *",
            [15, 15, 15, 15, 14, 15, 15, 16, 15, 15, 15, 15],
        ),
        ("0 0 1W * *", [1, 1, 1, 1, 3, 1, 1, 2, 1, 1, 1, 1]),
        ("0 0 31W * *", [29, 0, 31, 0, 31, 0, 30, 31, 0, 29, 0, 31]),
        (
            "0 0 * * 5#3",
            [15, 19, 19, 16, 21, 18, 16, 20, 17, 15, 19, 17],
        ),
        (
            "0 0 * * 5L",
            [29, 26, 26, 30, 28, 25, 30, 27, 24, 29, 26, 31],
        ),
        (
            "0 0 * * 7L",
            [31, 28, 28, 25, 30, 27, 25, 29, 26, 31, 28, 26],
        ),
        ("0 0 * * 1#5", [0, 0, 29, 0, 31, 0, 0, 30, 0, 0, 29, 0]),
    ];
    for (expr, days) in cases {
        let want: Vec<u64> = (1..=12)
            .zip(days)
            .filter(|&(_, d)| d > 0)
            .map(|(m, d)| utc(2027, m, d, 0, 0))
            .collect();
        expect(&mut conn, expr, "UTC", start, &want).await;
    }
    // SUNL is 0L: the same last Sundays
    expect(
        &mut conn,
        "0 0 * * SUNL",
        "UTC",
        start,
        &[utc(2027, 1, 31, 0, 0)],
    )
    .await;
}

#[tokio::test]
async fn every_ticks_at_whole_multiples_of_its_interval_in_any_zone() {
    let (_server, mut conn) = engine().await;
    let after = utc(2027, 6, 1, 10, 7) + 123;
    for (schedule, step) in [
        ("every 30s", 30_000u64),
        ("every 5m", 300_000),
        ("every 1h 30m", 5_400_000),
        ("every 2days", 172_800_000),
        ("every 1week", 604_800_000),
        ("every 1.5s", 1_500),
    ] {
        let got = ticks(&mut conn, schedule, "Asia/Kolkata", after, 3)
            .await
            .unwrap();
        let first = (after / step + 1) * step;
        assert_eq!(
            got,
            vec![first, first + step, first + 2 * step],
            "{schedule}"
        );
    }
}

/// Each refusal is `InvalidInput` saying what is wrong, in the words the Rust side used.
#[tokio::test]
async fn refusals_say_what_is_wrong() {
    let (_server, mut conn) = engine().await;
    let not_cron = [
        (
            "* * * *",
            "it has 4 fields: give 5 (minute hour day-of-month month day-of-week), 6 with a \
             second first, or 7 with a year last",
        ),
        (
            "60 * * * *",
            r#"the minute field "60": 60 is out of range 0-59"#,
        ),
        (
            "0 0 32 * *",
            r#"the day-of-month field "32": 32 is out of range 1-31"#,
        ),
        (
            "0 0 * 13 *",
            r#"the month field "13": 13 is out of range 1-12"#,
        ),
        (
            "0 0 * * 8",
            r#"the day-of-week field "8": 8 is out of range 0-7"#,
        ),
        (
            "0 0 * JANUARY *",
            r#"the month field "JANUARY" may not hold "U""#,
        ),
        (
            "0 0 * * FRY",
            r#"the day-of-week field "FRY" may not hold "F""#,
        ),
        (
            "0 0 * * 5#6",
            r#"the day-of-week field "5#6": #6: the nth weekday is 1-5"#,
        ),
        ("*/0 * * * *", r#"the minute field "*/0": a step of 0"#),
        (
            "0 0 5L * *",
            r#"the day-of-month field "5L": "5L": nL and n#k are taken in the day-of-week field only"#,
        ),
        ("", "it is empty"),
    ];
    let mut cases: Vec<(&str, &str, String)> = not_cron
        .iter()
        .map(|&(expr, why)| {
            let msg = format!(
                "schedule {expr:?} is not a cron expression ({why}) nor `every <duration>`"
            );
            (expr, "UTC", msg)
        })
        .collect();
    let zone = |tz: &str| {
        format!("time zone {tz:?} is not an IANA zone name (e.g. UTC, Europe/Amsterdam)")
    };
    cases.push(("0 0 * * *", "Mars/Olympus", zone("Mars/Olympus")));
    cases.push(("every 1s", "europe/amsterdam", zone("europe/amsterdam")));
    for (schedule, why) in [
        ("every 500ms", "the shortest interval is 1s"),
        (
            "every nonsense",
            r#""nonsense" is not a duration (expected number at 0)"#,
        ),
        (
            "every 5 parsecs",
            r#""5 parsecs" is not a duration (unknown time unit "parsecs", supported units: ns, "#,
        ),
        (
            "every 5",
            r#""5" is not a duration (time unit needed, for example 5sec or 5ms)"#,
        ),
    ] {
        cases.push((schedule, "UTC", format!("schedule {schedule:?}: {why}")));
    }
    for (schedule, tz, want) in cases {
        match ticks(&mut conn, schedule, tz, 0, 1).await {
            Err(Error::InvalidInput(msg)) => {
                assert!(msg.starts_with(&want), "{msg:?}, not {want:?}");
            }
            other => panic!("{schedule:?} in {tz}: {other:?}"),
        }
    }
}

/// A schedule with no tick (the 30th of February, an empty field, a year gone by, Feb 29 on a
/// Monday past the search's bound) answers none at once; one that fires rarely still finds
/// its tick years ahead.
#[tokio::test]
async fn a_schedule_that_never_fires_answers_none_quickly() {
    let (_server, mut conn) = engine().await;
    let after = utc(2027, 1, 1, 0, 0);
    for never in [
        "0 0 30 2 *",
        "0 0 31 4,6,9,11 *",
        ", * * * *",
        "0 0 0 1 1 * 2020",
        "0 0 * * L",
    ] {
        let begun = Instant::now();
        let got = ticks(&mut conn, never, "Europe/Amsterdam", after, 100)
            .await
            .unwrap();
        assert!(got.is_empty(), "{never}: {got:?}");
        assert!(
            begun.elapsed() < Duration::from_secs(2),
            "{never} took {:?}",
            begun.elapsed()
        );
    }
    // Feb 29 that is a Monday: 2044 (AND of day of month and day of week)
    let got = ticks(&mut conn, "0 0 29 2 +1", "UTC", after, 1)
        .await
        .unwrap();
    assert_eq!(shown(&got), shown(&[utc(2044, 2, 29, 0, 0)]));
}
