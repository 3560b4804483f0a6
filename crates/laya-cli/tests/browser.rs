//! The typing page of `laya serve` in a real browser: Debian's chromium, headless, driven through
//! chromedriver. Types a sentence character by character, checks that the bar changes, picks
//! candidate 2 with Alt+2 and checks the text it inserted, and saves a screenshot to
//! `target/typing-page.png`. Skipped, with a message, where chromedriver is not installed, unless
//! `LAYA_BROWSER_TESTS=required` (scripts/test.sh installs chromium and sets it).

mod common;
use common::laya;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{ClientBuilder, Locator};

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn chromedriver() -> Option<String> {
    let path = std::env::var("LAYA_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
    std::path::Path::new(&path).is_file().then_some(path)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The bar's candidates as (word, probability line) pairs.
async fn bar(c: &fantoccini::Client) -> Vec<String> {
    let mut out = Vec::new();
    for b in c.find_all(Locator::Css("#bar button")).await.unwrap() {
        out.push(b.text().await.unwrap());
    }
    out
}

/// Waits until `ok(bar)` holds, up to 10 s; returns the bar.
async fn wait_bar(c: &fantoccini::Client, what: &str, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let b = bar(c).await;
        if ok(&b) {
            return b;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{what}: the bar stayed {b:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn typing_page_updates_the_bar_and_picks_a_candidate() {
    let Some(driver) = chromedriver() else {
        assert_ne!(std::env::var("LAYA_BROWSER_TESTS").as_deref(), Ok("required"), "chromedriver is missing");
        eprintln!("browser test skipped: no chromedriver (apt-get install chromium chromium-driver, or run scripts/test.sh)");
        return;
    };
    let mut server = laya().args(["serve", "--addr", "127.0.0.1:0"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _server = Killed(server);
    let url = line.trim().strip_prefix("laya serve: listening on ").unwrap().to_string();

    let port = free_port();
    let _driver = Killed(Command::new(driver).arg(format!("--port={port}")).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({ "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=412,860"] }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let t0 = Instant::now();
    let c = loop {
        match ClientBuilder::new(connector.clone()).capabilities(caps.clone()).connect(&format!("http://127.0.0.1:{port}")).await {
            Ok(c) => break c,
            Err(e) if t0.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("chromedriver did not start a session: {e}"),
        }
    };

    c.goto(&format!("{url}/")).await.unwrap();
    let first = wait_bar(&c, "the empty context", |b| b.len() == 5).await;
    let text = c.find(Locator::Id("text")).await.unwrap();
    let mut seen = vec![first.clone()];
    for ch in "今天天气".chars() {
        text.send_keys(&ch.to_string()).await.unwrap();
        let last = seen.last().unwrap().clone();
        seen.push(wait_bar(&c, &format!("after {ch}"), |b| b.len() == 5 && b != last.as_slice()).await);
    }
    assert!(seen.windows(2).all(|w| w[0] != w[1]), "the bar changes at every keystroke: {seen:?}");

    // Candidate 2 as the page shows it: "2 WORD" then its probability (and what it replaces).
    let before: String = text.prop("value").await.unwrap().unwrap();
    let shown = seen.last().unwrap()[1].clone();
    let word = shown.strip_prefix("2 ").unwrap().split('\n').next().unwrap().trim().to_string();
    let replace = shown.split("replaces ").nth(1).map_or(0, |n| n.trim().parse::<usize>().unwrap());
    c.execute(
        "document.getElementById('text').dispatchEvent(new KeyboardEvent('keydown', {key: '2', altKey: true, bubbles: true}));",
        vec![],
    )
    .await
    .unwrap();
    let after: String = text.prop("value").await.unwrap().unwrap();
    let kept: String = before.chars().take(before.chars().count() - replace).collect();
    assert_eq!(after, format!("{kept}{word}"), "picked {shown:?}");
    wait_bar(&c, "after the pick", |b| b.len() == 5 && b != seen.last().unwrap().as_slice()).await;

    let png = c.screenshot().await.unwrap();
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/typing-page.png");
    std::fs::write(&out, png).unwrap();
    c.close().await.unwrap();
}
