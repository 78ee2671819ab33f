//! `hero_complete`'s trim of a work stream (`trim_done` in lib/streams.lua): the done entries
//! before the oldest job still running go with the stream's head, the ones after it by id. Which
//! side an entry is on is told from its id's text, whose length varies with its sequence.

use super::*;

/// Entries done behind an older job that runs on are deleted by id, whatever the length of
/// their ids beside the running one's: a later millisecond with a shorter sequence or a longer
/// one, and the running job's own millisecond with a longer sequence (a submit of 50 in one
/// millisecond numbers its entries 0 to 49). An earlier one goes with the head. Nothing done
/// stays; the running job's entry does.
#[tokio::test]
async fn done_entries_go_whatever_the_length_of_their_ids_while_an_older_job_runs() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let mut raw = server.conn().await;
    let stream = stream_by_hand(&c, &mut raw, "trim").await;
    let m = clock::now_ms();
    // `b` runs on; the `a`s are before it, the `c`s after it: more than the eight a call
    // deletes by id alone, so the trim tells them apart
    let entries = [
        ("a1", format!("{}-7", m - 2)),
        ("a2", format!("{}-10", m - 1)),
        ("a3", format!("{}-123", m - 1)),
        ("a4", format!("{m}-3")),
        ("b", format!("{m}-5")),
        ("c1", format!("{m}-12")),
        ("c2", format!("{m}-99")),
        ("c3", format!("{m}-100")),
        ("c4", format!("{}-3", m + 1)),
        ("c5", format!("{}-100", m + 1)),
        ("c6", format!("{}-0", m + 2)),
    ];
    for (id, entry) in &entries {
        job_by_hand(&c, &mut raw, &stream, "trim", id, entry).await;
    }
    let got = fetch(&c, "g:a:1", std::slice::from_ref(&stream), 25).await;
    assert_eq!(got.jobs.len(), entries.len());
    let lease = |id: &str| {
        got.jobs
            .iter()
            .find(|j| j.job_id.as_str() == id)
            .map(|j| j.entry.clone())
            .unwrap()
    };
    let done: Vec<(String, String)> = entries
        .iter()
        .filter(|(id, _)| *id != "b")
        .map(|(id, _)| (id.to_string(), lease(id)))
        .collect();
    let batch: Vec<(&str, &str, &str, Ending, &str)> = done
        .iter()
        .map(|(id, l)| (id.as_str(), l.as_str(), "", Ending::Done, "ok"))
        .collect();
    let answers = complete_batch(&c, &stream, &batch).await;
    assert!(
        answers.iter().all(|a| *a == Completion::Completed),
        "{answers:?}"
    );
    let left: Vec<String> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query_async::<Vec<(String, Vec<(String, String)>)>>(&mut raw)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, f)| f[0].1.clone())
        .collect();
    assert_eq!(
        left,
        ["b"],
        "every done entry went; the running job's stayed"
    );
    assert_eq!(
        complete(&c, &stream, "b", &lease("b"), "done", "ok").await,
        Completion::Completed
    );
    let len: usize = raw.xlen(&stream).await.unwrap();
    assert_eq!(len, 0);
}
