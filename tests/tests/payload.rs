//! Typed payloads: a Rust producer submits any `Serialize` value as MessagePack beside the
//! script, a handler takes it back as its type; bytes of another shape end the job `error` with
//! the reason, and nothing is retried.

use std::time::Duration;

use hero_client::Client;
use hero_protocol::{JobId, NewJob, Status};
use hero_testkit::{InProcWorker, RedisServer};
use hero_worker::{Outcome, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Resize {
    image: String,
    width: u32,
    /// binary data survives the record's round trip as it is
    thumbnail: Vec<u8>,
}

#[derive(Serialize)]
struct Other {
    name: String,
}

#[tokio::test]
async fn a_typed_payload_round_trips_and_one_of_the_wrong_shape_ends_the_job_error() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let sent = Resize {
        image: "cat.png".into(),
        width: 640,
        thumbnail: vec![0, 159, 146, 150, 255, 0xc1],
    };
    let good = NewJob::builder("resize", "")
        .id("p-good")
        .payload(&sent)
        .build()
        .unwrap();
    let bad = NewJob::builder("resize", "")
        .id("p-bad")
        .retries(3)
        .payload(&Other {
            name: "not a resize".into(),
        })
        .build()
        .unwrap();
    client.submit(&good).await.unwrap();
    client.submit(&bad).await.unwrap();
    // the record as any reader gets it keeps the bytes
    assert_eq!(
        client.get(good.id()).await.unwrap().payload.as_deref(),
        good.job().payload.as_deref()
    );

    let _w = InProcWorker::spawn(Worker::builder(client.clone()).types(["resize"]).handler(
        |job: hero_protocol::Job, _| async move {
            let r: Resize = match job.payload() {
                Ok(r) => r,
                Err(e) => return Outcome::from(e),
            };
            Outcome::Done(format!("{}:{}:{:?}", r.image, r.width, r.thumbnail))
        },
    ));
    let limit = Duration::from_secs(20);
    let ok = client.wait(good.id(), limit).await.unwrap();
    assert_eq!(ok.status, Status::Finished, "{ok:?}");
    assert_eq!(
        ok.output,
        format!("cat.png:640:{:?}", sent.thumbnail),
        "the handler got the value that was sent"
    );
    let failed = client.wait(bad.id(), limit).await.unwrap();
    assert_eq!(failed.status, Status::Error, "{failed:?}");
    assert!(
        failed.error.contains("payload of job p-bad")
            && failed.error.contains("do not decode as")
            && failed.error.contains("Resize"),
        "the reason names the job and the type: {}",
        failed.error
    );
    let record = client.get(&JobId::new("p-bad").unwrap()).await.unwrap();
    assert_eq!(
        record.attempts, 1,
        "a payload of the wrong shape is not retried"
    );
}
