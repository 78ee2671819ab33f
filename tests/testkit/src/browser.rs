//! A real browser for the dashboard's tests: headless Chromium (Debian's `chromium`) driven
//! through WebDriver (`chromedriver`, by fantoccini), and screenshots under
//! `target/screenshots/` to look at.

use std::path::PathBuf;
use std::time::Duration;

use fantoccini::{Client as Browser, ClientBuilder, Locator};

use crate::{free_port, wait_for, Proc};

/// Where screenshots go (`target/screenshots/`), made if missing.
pub fn shots_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    dir
}

/// A screenshot of what `b` shows, as `target/screenshots/<name>.png`.
pub async fn shot(b: &Browser, name: &str) {
    let png = b.screenshot().await.expect("screenshot");
    std::fs::write(shots_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

/// chromedriver, and on drop every Chromium process of its session (found by the session's
/// profile directory in their command lines): a test that fails before it closes its session,
/// or never closes it, leaves no browser behind (chromedriver killed alone orphans Chromium).
pub struct Driver {
    _proc: Proc,
    profile: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // the profile's path, in any argument: the browser's own `--user-data-dir=`, and its
        // helpers' (the crash handler names the profile's `Crash Reports` instead)
        let needle = self.profile.display().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        let pids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                cmdline.contains(&needle).then(|| pid.to_string())
            })
            .collect();
        if !pids.is_empty() {
            let _ = std::process::Command::new("kill")
                .arg("-KILL")
                .args(&pids)
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// chromedriver on a free port, and a headless Chromium session through it at 1280×800 (`dark`:
/// with the system's dark colour scheme).
pub async fn browser(dark: bool) -> (Driver, Browser, PathBuf) {
    let port = free_port();
    let driver = Proc::spawn(
        std::path::Path::new("/usr/bin/chromedriver"),
        &[&format!("--port={port}")],
        &[],
        None,
    );
    wait_for(
        "chromedriver to listen",
        Duration::from_secs(20),
        || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    let profile = std::env::temp_dir().join(format!("hero-chromium-{}-{port}", std::process::id()));
    let mut args = vec![
        "--headless=new".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--window-size=1280,800".into(),
        "--no-first-run".into(),
        "--disable-quic".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    if dark {
        args.push("--force-dark-mode".into());
    }
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({ "binary": "/usr/bin/chromium", "args": args }),
    );
    let b = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a Chromium session through chromedriver (scripts/browser-setup installs both)");
    (
        Driver {
            _proc: driver,
            profile: profile.clone(),
        },
        b,
        profile,
    )
}

/// The text of the first element matching `css`, once there is one (within 10 s, or the test
/// fails naming it).
pub async fn text_of(b: &Browser, css: &str) -> String {
    let el = b
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"));
    el.text().await.expect("element text")
}

/// Signs the browser in on the dashboard's form with `token`, asking for changes (the admin
/// token's session reads only unless asked), and waits for the page it lands on.
pub async fn sign_in_browser(b: &Browser, base: &str, token: &str) {
    // a token in the address signs nothing in: it answers the sign-in form, signed in or not
    b.goto(&format!("{base}/?token=")).await.unwrap();
    let field = b
        .find(Locator::Css("#sign-in input[name=token]"))
        .await
        .unwrap();
    field.send_keys(token).await.unwrap();
    b.find(Locator::Css("#sign-in input[name=changes]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.find(Locator::Css("#sign-in button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    b.wait()
        .at_most(std::time::Duration::from_secs(20))
        .for_element(Locator::Css("nav"))
        .await
        .unwrap();
}
