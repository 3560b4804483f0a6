//! The typing page of `laya serve` in a real browser: Debian's chromium, headless, driven through
//! chromedriver. Types a sentence character by character, checks that the bar changes, picks
//! candidate 2 with Alt+2 and checks the text it inserted, saves a screenshot to
//! `target/typing-page.png`, then types fast against slowed requests and checks that the page
//! keeps one request in flight and shows the candidates of the latest text. Skipped, with a message, where chromedriver is not installed, unless
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

/// The bar's candidates as their text ("1 WORD\nP%"), read in one script: the page may replace
/// the buttons between one WebDriver call and the next.
async fn bar(c: &fantoccini::Client) -> Vec<String> {
    let texts = c.execute("return Array.from(document.querySelectorAll('#bar button'), (b) => b.innerText);", vec![]).await.unwrap();
    serde_json::from_value(texts).unwrap()
}

/// The words of the bar's candidates ("2 WORD\nP% · replaces N" → "WORD").
fn words(bar: &[String]) -> Vec<String> {
    bar.iter().map(|b| b.split('\n').next().unwrap().split_once(' ').unwrap().1.trim().to_string()).collect()
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

    at_most_one_request_in_flight_and_the_latest_text_wins(&c, &first).await;
    c.close().await.unwrap();
}

/// Types a sentence in one go while every request the page makes is held 150 ms in the browser,
/// so that typing outruns the answers: the page must never have two requests in flight, must
/// send fewer requests than keystrokes (the waiting context is replaced), and must end on the
/// candidates of the whole text. The count is kept by a wrapper of `fetch`, not by the page.
async fn at_most_one_request_in_flight_and_the_latest_text_wins(c: &fantoccini::Client, empty_bar: &[String]) {
    let text = c.find(Locator::Id("text")).await.unwrap();
    c.execute("const t = document.getElementById('text'); t.value = ''; t.dispatchEvent(new Event('input'));", vec![]).await.unwrap();
    wait_bar(c, "the cleared text", |b| b == empty_bar).await;
    c.execute(
        r#"
        const probe = window.__probe = { active: 0, max: 0, sent: [] };
        const real = window.__realFetch = window.fetch.bind(window);
        window.fetch = (url, init) => {
          probe.active += 1;
          probe.max = Math.max(probe.max, probe.active);
          probe.sent.push(JSON.parse(init.body).context);
          return new Promise((r) => setTimeout(r, 150)).then(() => real(url, init)).finally(() => { probe.active -= 1; });
        };
        "#,
        vec![],
    )
    .await
    .unwrap();
    let typed = "我们今天讨论一下光标的默认位置";
    text.send_keys(typed).await.unwrap();

    // What the server answers for the whole text, asked past the wrapper.
    let want = c
        .execute_async(
            r#"
            const done = arguments[arguments.length - 1];
            window.__realFetch("/v1/predict", {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ context: document.getElementById("text").value, k: 5 }),
            }).then((r) => r.json()).then((b) => done(b.candidates.map((c) => c.word)));
            "#,
            vec![],
        )
        .await
        .unwrap();
    let want: Vec<String> = serde_json::from_value(want).unwrap();
    assert_eq!(want.len(), 5);
    wait_bar(c, "after typing fast", |b| words(b) == want).await;
    let t0 = Instant::now();
    let probe = loop {
        let probe = c.execute("return window.__probe;", vec![]).await.unwrap();
        if probe["active"] == 0 {
            break probe;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "requests still in flight: {probe}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let sent: Vec<String> = serde_json::from_value(probe["sent"].clone()).unwrap();
    println!("typed {} characters at once: {} requests {sent:?}, at most {} in flight", typed.chars().count(), sent.len(), probe["max"]);
    assert_eq!(probe["max"], 1, "requests in flight at once: {probe}");
    assert!(sent.len() < typed.chars().count(), "a waiting context is replaced by a newer one: {sent:?}");
    assert_eq!(sent.last().map(String::as_str), Some(typed), "the last request is for the whole text: {sent:?}");
    let value: String = text.prop("value").await.unwrap().unwrap();
    assert_eq!(value, typed);
}
