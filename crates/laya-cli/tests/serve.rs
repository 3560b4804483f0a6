//! `laya serve` (docs/serve.md) through the `laya` binary and its embedded default model: the
//! same candidates as `laya predict --jsonl`, learn and forget, JSON errors with the right
//! statuses, localhost by default, the hot swap (SIGHUP, `laya install`), and a load test.

mod common;
use common::{laya, ok, tmp};

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A `laya serve` on a free port, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        Server::spawn(args, Stdio::inherit())
    }

    /// A server whose stderr lines come through the receiver (and are echoed to this stderr).
    fn start_logged(args: &[&str]) -> (Server, mpsc::Receiver<String>) {
        let mut server = Server::spawn(args, Stdio::piped());
        let stderr = server.child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("server: {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (server, rx)
    }

    fn spawn(args: &[&str], stderr: Stdio) -> Server {
        let mut child = laya().args(["serve", "--addr", "127.0.0.1:0"]).args(args).stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().strip_prefix("laya serve: listening on ").unwrap_or_else(|| panic!("first line: {line:?}")).to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        Server { child, url }
    }

    fn post(&self, path: &str, body: &str) -> (u16, String) {
        let res = agent().post(format!("{}{path}", self.url)).header("content-type", "application/json").send(body).unwrap();
        read(res)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client that returns error statuses as responses, to look at their bodies.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

fn read(mut res: ureq::http::Response<ureq::Body>) -> (u16, String) {
    let status = res.status().as_u16();
    (status, res.body_mut().read_to_string().unwrap())
}

/// What `laya predict --jsonl` prints for these lines.
fn jsonl(args: &[&str], lines: &[String]) -> Vec<String> {
    let mut child = laya().args(["predict", "--jsonl"]).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in lines {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    ok(&child.wait_with_output().unwrap()).lines().map(str::to_string).collect()
}

fn context_line(c: &str) -> String {
    serde_json::json!({ "context": c }).to_string()
}

#[test]
fn predict_answers_what_predict_jsonl_prints() {
    let long = "我们今天讨论一下光标的默认位置，".repeat(40) + "然后";
    let contexts = ["今天天气", "", "😀🎉 ", long.as_str(), "我在用拉", "hello wor", "\u{0}\t控制"];
    let lines: Vec<String> = contexts.iter().map(|c| context_line(c)).collect();
    let expected = jsonl(&[], &lines);
    let server = Server::start(&[]);
    for (line, want) in lines.iter().zip(&expected) {
        let (status, body) = server.post(
            "/v1/predict",
            &serde_json::json!({ "context": serde_json::from_str::<serde_json::Value>(line).unwrap()["context"], "k": 5 }).to_string(),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(&body, want, "{line}");
    }
    // The same context again from a session that typed on (the reused keys and values change
    // nothing), and `k` left out means 5.
    for (c, want) in contexts.iter().zip(&expected).rev() {
        let (_, body) = server.post("/v1/predict", &serde_json::json!({ "context": c, "session": "typist" }).to_string());
        assert_eq!(&body, want);
    }
    let res = agent()
        .post(format!("{}/v1/predict", server.url))
        .header("content-type", "application/json")
        .send(r#"{"context": "今天"}"#)
        .unwrap();
    assert!(res.headers().get("x-laya-us").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok()).is_some());
}

fn has(body: &str, word: &str, replace: u64) -> bool {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["candidates"].as_array().unwrap().iter().any(|c| c["word"] == word && c["replace"] == replace)
}

#[test]
fn learn_and_forget_take_effect_and_are_saved_to_the_user_file() {
    let path = tmp("serve.layu");
    let p = path.to_str().unwrap();
    let ask = r#"{"context": "我在用拉"}"#;
    {
        let server = Server::start(&["--user", p]);
        assert!(!has(&server.post("/v1/predict", ask).1, "拉雅", 1));
        assert_eq!(server.post("/v1/learn", r#"{"learn": "拉雅"}"#), (200, r#"{"learned":1}"#.into()));
        // Another session shares the history.
        assert!(has(&server.post("/v1/predict", r#"{"context": "我在用拉", "session": "b"}"#).1, "拉雅", 1));
        assert!(path.exists(), "saved after the learn");
    }
    let server = Server::start(&["--user", p]);
    assert!(has(&server.post("/v1/predict", ask).1, "拉雅", 1), "kept across processes");
    assert_eq!(server.post("/v1/forget", r#"{"forget": "拉雅"}"#), (200, r#"{"forgotten":true}"#.into()));
    assert!(!has(&server.post("/v1/predict", ask).1, "拉雅", 1));
    assert_eq!(server.post("/v1/forget", r#"{"forget": "拉雅"}"#), (200, r#"{"forgotten":false}"#.into()));
}

#[test]
fn every_error_is_a_json_object_with_the_right_status() {
    let server = Server::start(&[]);
    let a = agent();
    let url = |p: &str| format!("{}{p}", server.url);
    let mut cases: Vec<(u16, &str, ureq::http::Response<ureq::Body>)> = vec![
        (404, "unknown path", a.get(url("/v2/nothing")).call().unwrap()),
        (405, "GET on predict", a.get(url("/v1/predict")).call().unwrap()),
        (405, "POST on healthz", a.post(url("/healthz")).send("").unwrap()),
        (415, "text/plain", a.post(url("/v1/predict")).header("content-type", "text/plain").send(r#"{"context": "x"}"#).unwrap()),
        (415, "no content type", a.post(url("/v1/predict")).send(r#"{"context": "x"}"#).unwrap()),
        (
            431,
            "20 KiB of headers",
            a.post(url("/v1/predict"))
                .header("content-type", "application/json")
                .header("x-big", "x".repeat(20 * 1024))
                .send(r#"{"context": "x"}"#)
                .unwrap(),
        ),
        (
            431,
            "500 KiB of headers, past hyper's default read buffer",
            // ureq writes the whole head from one buffer, 128 KiB unless told.
            ureq::Agent::from(ureq::Agent::config_builder().http_status_as_error(false).output_buffer_size(1 << 20).build())
                .post(url("/v1/predict"))
                .header("content-type", "application/json")
                .header("x-big", "x".repeat(500 * 1024))
                .send(r#"{"context": "x"}"#)
                .unwrap(),
        ),
        (
            431,
            "200 header lines, past hyper's default of 100",
            (0..200)
                .fold(a.post(url("/v1/predict")).header("content-type", "application/json"), |r, i| r.header(format!("x-h{i}"), "1"))
                .send(r#"{"context": "x"}"#)
                .unwrap(),
        ),
        (
            413,
            "64 KiB + 1",
            a.post(url("/v1/predict")).header("content-type", "application/json").send(&vec![b' '; 64 * 1024 + 1][..]).unwrap(),
        ),
    ];
    for (body, what) in [
        ("{", "malformed"),
        ("", "empty"),
        (r#"{"context": 5}"#, "wrong type"),
        (r#"{"context": "x", "k": -1}"#, "negative k"),
        (r#"{"context": "x", "k": 1000}"#, "k too large"),
        (r#"["x"]"#, "an array"),
        (r#"{"learn": "x"}"#, "another endpoint's field"),
        (r#"{"context": "x", "extra": 1}"#, "an unknown field"),
        ("{\"context\": \"\u{ff}\"}\u{0}", "trailing bytes"),
    ] {
        cases.push((400, what, a.post(url("/v1/predict")).header("content-type", "application/json").send(body).unwrap()));
    }
    cases.push((
        400,
        "learn a number",
        a.post(url("/v1/learn")).header("content-type", "application/json").send(r#"{"learn": 5}"#).unwrap(),
    ));
    cases.push((
        400,
        "forget null",
        a.post(url("/v1/forget")).header("content-type", "application/json").send(r#"{"forget": null}"#).unwrap(),
    ));
    for (status, what, res) in cases {
        let ct = res.headers().get("content-type").unwrap().to_str().unwrap().to_string();
        let (got, body) = read(res);
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(ct, "application/json", "{what}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: {body}: {e}"));
        assert!(v["error"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {body}");
    }
    // Still serving after all that.
    assert_eq!(read(a.get(url("/healthz")).call().unwrap()).0, 200);
}

#[test]
fn binds_only_localhost_by_default_and_serves_the_page() {
    let help = ok(&laya().args(["serve", "--help"]).output().unwrap());
    assert!(help.contains("[default: 127.0.0.1:8757]"), "{help}");
    let server = Server::start(&[]);
    let res = agent().get(format!("{}/", server.url)).call().unwrap();
    assert!(res.headers().get("content-type").unwrap().to_str().unwrap().starts_with("text/html"));
    let (status, page) = read(res);
    assert_eq!(status, 200);
    assert!(page.contains("<textarea"), "{page}");
}

#[test]
fn load_32_clients_1000_requests_each_without_an_error() {
    const CLIENTS: usize = 32;
    const REQUESTS: usize = 1000;
    let server = Server::start(&[]);
    let text: Vec<char> = "今天天气很好我们一起去公园散步然后吃饭看电影回家睡觉".chars().collect();
    let start = Instant::now();
    let mut latencies: Vec<Duration> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (url, text) = (&server.url, &text);
                s.spawn(move || {
                    let a = agent();
                    let mut times = Vec::with_capacity(REQUESTS);
                    for r in 0..REQUESTS {
                        // Each client types the text a character at a time, in its own session.
                        let context: String = text[..(r + c) % text.len()].iter().collect();
                        let body = serde_json::json!({ "context": context, "session": format!("c{c}") }).to_string();
                        let t = Instant::now();
                        let res = a.post(format!("{url}/v1/predict")).header("content-type", "application/json").send(&body).unwrap();
                        let (status, body) = read(res);
                        times.push(t.elapsed());
                        assert_eq!(status, 200, "{body}");
                        assert!(body.starts_with(r#"{"candidates":["#), "{body}");
                    }
                    times
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let wall = start.elapsed();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    assert_eq!(latencies.len(), CLIENTS * REQUESTS);
    println!(
        "serve load: {} requests, 0 errors, {:.1} s, {:.0} req/s, p50 {:?}, p99 {:?}",
        latencies.len(),
        wall.as_secs_f64(),
        latencies.len() as f64 / wall.as_secs_f64(),
        at(0.5),
        at(0.99)
    );
}

/// `/healthz`'s count of reloads.
fn generation(server: &Server) -> u64 {
    health(server).0
}

/// `/healthz`'s count of reloads and checksum of the serving model.
fn health(server: &Server) -> (u64, String) {
    let (status, body) = read(agent().get(format!("{}/healthz", server.url)).call().unwrap());
    assert_eq!(status, 200, "{body}");
    let v = serde_json::from_str::<serde_json::Value>(&body).unwrap();
    (v["model_generation"].as_u64().unwrap(), v["model_checksum"].as_str().unwrap().to_string())
}

fn hangup(server: &Server) {
    let status = std::process::Command::new("kill").args(["-HUP", &server.child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[cfg(unix)]
#[test]
fn sighup_swaps_in_a_good_model_file_and_keeps_serving_on_a_bad_one() {
    let model = tmp("hup.laya");
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/default.laya"), &model).unwrap();
    let server = Server::start(&["--model", model.to_str().unwrap()]);
    let ask = r#"{"context": "今天天气"}"#;
    let before = server.post("/v1/predict", ask);
    hangup(&server);
    let deadline = Instant::now() + Duration::from_secs(20);
    while generation(&server) == 0 {
        assert!(Instant::now() < deadline, "no reload after SIGHUP");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.post("/v1/predict", ask), before, "the same file answers alike after the swap");
    // A damaged file is refused and the loaded model keeps serving. It is renamed into place,
    // as `laya install` does: the served model is memory-mapped, so it is never rewritten.
    let bad = tmp("bad.laya");
    std::fs::write(&bad, b"not a model").unwrap();
    std::fs::rename(&bad, &model).unwrap();
    hangup(&server);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(generation(&server), 1);
    assert_eq!(server.post("/v1/predict", ask), before);
}

#[test]
fn a_slow_client_gets_a_json_408_and_others_are_still_served() {
    use std::io::Read;
    let server = Server::start(&[]);
    let addr = server.url.strip_prefix("http://").unwrap();
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    // Headers promise 20 bytes of body; 5 come and the rest never do.
    write!(slow, "POST /v1/predict HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n{{\"con")
        .unwrap();
    assert_eq!(server.post("/v1/predict", r#"{"context": "今天"}"#).0, 200, "served while the slow one waits");
    slow.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut reply = Vec::new();
    let _ = slow.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.to_ascii_lowercase().contains("content-type: application/json"), "{reply}");
    assert!(reply.contains(r#"{"error":"#), "{reply}");
}

#[test]
fn headers_past_the_raised_read_buffer_get_a_bare_431_or_a_closed_connection() {
    use std::io::Read;
    let server = Server::start(&[]);
    let addr = server.url.strip_prefix("http://").unwrap();
    let mut big = std::net::TcpStream::connect(addr).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // 2 MiB of headers: hyper stops reading at 1 MiB, answers and closes, so the write may fail.
    let head = format!("POST /v1/predict HTTP/1.1\r\nhost: {addr}\r\nx-big: {}\r\n\r\n", "x".repeat(2 << 20));
    let _ = big.write_all(head.as_bytes());
    let mut reply = Vec::new();
    let _ = big.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    // hyper's own answer, not ours: no JSON body.
    assert!(reply.is_empty() || (reply.starts_with("HTTP/1.1 431") && reply.contains("content-length: 0\r\n")), "{reply}");
    assert_eq!(read(agent().get(format!("{}/healthz", server.url)).call().unwrap()).0, 200, "still serving");
}

fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default.laya")
}

/// Another model than `default_model()`: the same network in f16, so other probabilities.
fn other_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default-f16.laya")
}

/// A directory of this test's own holding a copy of the default model as `served.laya`.
fn served_copy(test: &str) -> (PathBuf, PathBuf) {
    let dir = tmp(test);
    std::fs::create_dir_all(&dir).unwrap();
    let served = dir.join("served.laya");
    std::fs::copy(default_model(), &served).unwrap();
    (dir, served)
}

/// `laya install MODEL --into DIR --name served.laya`; the checksum it prints.
fn install(model: &Path, dir: &Path) -> String {
    let out =
        ok(&laya().args(["install", model.to_str().unwrap(), "--into", dir.to_str().unwrap(), "--name", "served.laya"]).output().unwrap());
    out.split("checksum ").nth(1).and_then(|s| s.get(..16)).unwrap_or_else(|| panic!("{out}")).to_string()
}

/// Waits, up to 30 s, for `/healthz` to count `generation` reloads.
fn wait_for_generation(server: &Server, generation: u64) -> (u64, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = health(server);
        if h.0 >= generation {
            return h;
        }
        assert!(Instant::now() < deadline, "still {h:?} after 30 s, waiting for generation {generation}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits, up to 30 s, for a stderr line containing `needle`.
fn wait_for_line(log: &mpsc::Receiver<String>, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match log.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(e) => panic!("no stderr line with {needle:?} within 30 s: {e}"),
        }
    }
}

#[test]
fn laya_install_into_the_served_directory_swaps_the_model_in() {
    let (dir, served) = served_copy("install-swap");
    let server = Server::start(&["--model", served.to_str().unwrap()]);
    let (generation, old) = health(&server);
    assert_eq!(generation, 0);
    let ask = context_line("今天天气");
    assert_eq!(server.post("/v1/predict", &ask).1, jsonl(&["--model", served.to_str().unwrap()], std::slice::from_ref(&ask))[0]);

    let new = install(&other_model(), &dir);
    assert_ne!(new, old, "the two models differ");
    let (_, checksum) = wait_for_generation(&server, 1);
    assert_eq!(checksum, new, "healthz names the installed model");
    // What the new file answers, byte for byte, from every session: the default one, and one
    // made before the swap.
    let want = jsonl(&["--model", other_model().to_str().unwrap()], std::slice::from_ref(&ask));
    assert_eq!(server.post("/v1/predict", &ask).1, want[0]);
    assert_eq!(server.post("/v1/predict", r#"{"context": "今天天气", "session": "s"}"#).1, want[0]);
    // Nothing changed since: no further reload.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(health(&server), (1, new));
}

#[test]
fn a_corrupt_file_put_in_place_is_refused_and_the_old_model_keeps_serving() {
    let (dir, served) = served_copy("corrupt-swap");
    let (server, log) = Server::start_logged(&["--model", served.to_str().unwrap()]);
    let before = health(&server);
    let ask = r#"{"context": "今天天气"}"#;
    let answer = server.post("/v1/predict", ask);
    assert_eq!(answer.0, 200);

    // The first half of a model, renamed into place as an install would: a half-written file.
    let bytes = std::fs::read(other_model()).unwrap();
    let torn = dir.join("torn.tmp");
    std::fs::write(&torn, &bytes[..bytes.len() / 2]).unwrap();
    std::fs::rename(&torn, &served).unwrap();
    let line = wait_for_line(&log, "refused, the loaded model keeps serving");
    assert!(line.contains("served.laya"), "{line}");
    assert_eq!(health(&server), before);
    assert_eq!(server.post("/v1/predict", ask), answer);
    // Refused once, not again at every look while the file stays as it is.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(log.try_iter().all(|l| !l.contains("refused")), "the same file refused twice");

    // A good file after it is taken.
    let new = install(&other_model(), &dir);
    let (generation, checksum) = wait_for_generation(&server, 1);
    assert_eq!((generation, checksum), (1, new));
    wait_for_line(&log, "model reloaded");
}
