//! Headless Chromium for the dashboard tests, driven through `chromedriver` (WebDriver) by
//! `fantoccini`, plus raw HTTP for what a browser would not send.
//!
//! Debian's `chromium` and `chromium-driver` packages must be installed; `scripts/test.sh`
//! installs them when they are missing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The flags Chromium runs with here: no sandbox (containers), no GPU, and nothing that
/// reaches the network on its own.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
];

fn find_program(candidates: &[&str]) -> Option<PathBuf> {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
}

/// A headless Chromium session; the driver and the browser's processes are killed on drop.
pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: PathBuf,
}

impl Browser {
    /// Starts `chromedriver` on a free port and a Chromium session with a fresh profile.
    pub async fn launch() -> Browser {
        let chromium = find_program(&["/usr/lib/chromium/chromium", "/usr/bin/chromium"]).expect(
            "Chromium is not installed: run `bash scripts/test.sh`, which installs Debian's \
                 chromium and chromium-driver, or `apt-get install -y chromium chromium-driver`",
        );
        let chromedriver = find_program(&["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"])
            .expect(
                "chromedriver is not installed: `apt-get install -y chromium-driver` (scripts/test.sh does)",
            );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = std::env::temp_dir().join(format!("tasks-chromium-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&profile).expect("a profile directory");
        let mut args: Vec<String> = CHROMIUM_FLAGS
            .iter()
            .map(|flag| (*flag).to_owned())
            .collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), "chrome".into());
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": chromium, "args": args }),
        );
        let url = format!("http://127.0.0.1:{port}");
        // Generous: on a loaded machine Chromium can take long to start.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(error) if tokio::time::Instant::now() < deadline => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => panic!("no Chromium session through chromedriver: {error}"),
            }
        };
        Browser {
            client,
            driver,
            profile,
        }
    }

    /// Opens `url` and waits for its `<main>`.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("the page loads");
        self.wait_for("main").await;
    }

    /// Waits up to 15 s for an element matching `css`, and returns its text (found again
    /// when a live refresh replaced it in between; on a loaded machine that can happen
    /// several times in a row, so it tries for a while, a little apart, like `click`).
    pub async fn wait_for(&self, css: &str) -> String {
        let mut tries = 0;
        loop {
            tries += 1;
            let element = self
                .client
                .wait()
                .at_most(Duration::from_secs(15))
                .for_element(Locator::Css(css))
                .await
                .unwrap_or_else(|error| panic!("no element {css}: {error}"));
            match element.text().await {
                Ok(text) => return text,
                Err(error) if tries < 50 => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(37)).await;
                }
                Err(error) => panic!("cannot read {css}: {error}"),
            }
        }
    }

    /// Waits up to 15 s until the element matching `css` holds `needle` in its text, and
    /// returns that text. For an element that a submitted form's answer replaces with one
    /// of the same id (an error line, a notice): [`Browser::wait_for`] would read the old
    /// page's while the new one loads.
    pub async fn wait_for_text(&self, css: &str, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let text = self.wait_for(css).await;
            if text.contains(needle) {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{css} still says {text:?}, not {needle:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The texts of every element matching `css` (read again, a little later, when a live
    /// refresh replaced the elements while they were read).
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let mut tries = 0;
        'again: loop {
            tries += 1;
            let mut texts = Vec::new();
            for element in self
                .client
                .find_all(Locator::Css(css))
                .await
                .expect("find_all")
            {
                match element.text().await {
                    Ok(text) => texts.push(text),
                    Err(error) if tries < 50 => {
                        let _ = error;
                        tokio::time::sleep(Duration::from_millis(37)).await;
                        continue 'again;
                    }
                    Err(error) => panic!("cannot read {css}: {error}"),
                }
            }
            return texts;
        }
    }

    /// Clicks the element matching `css` (found again when a live refresh replaced it; on a
    /// loaded machine a refresh can land between finding and clicking several times in a
    /// row, so it tries for a while, a little apart).
    pub async fn click(&self, css: &str) {
        let mut tries = 0;
        loop {
            tries += 1;
            let element = self
                .client
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|error| panic!("no element {css} to click: {error}"));
            match element.click().await {
                Ok(()) => return,
                Err(error) if tries < 50 => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(37)).await;
                }
                Err(error) => panic!("cannot click {css}: {error}"),
            }
        }
    }

    /// Writes a PNG screenshot of the page to `dir/name.png` and returns its path.
    pub async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
        std::fs::create_dir_all(dir).expect("the screenshot directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is written");
        path
    }

    /// Ends the session (closing Chromium) and stops the driver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        // A session that did not end (a test that panicked, a session that never started)
        // leaves Chromium running without its driver. Its processes are the ones started
        // with this session's profile directory (`pkill` from procps; where it is missing
        // nothing is stopped).
        let _ = Command::new("pkill")
            .arg("-KILL")
            .args(["-f", "--"])
            .arg(format!("--user-data-dir={}", self.profile.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The status code, headers (lower-cased names) and body of a raw HTTP/1.1 request to
/// `addr`; `request` is everything before the body, each line ending in `\r\n`.
///
/// A server may answer before it read the whole body (a 413) and close the connection with
/// the rest unread, which resets it: the write of the body may then fail, and the read end
/// with a reset after the answer. Both are taken as the end of the exchange once an answer
/// was read, so that what the test sees does not depend on how much of the body the server
/// had buffered when it closed.
pub async fn http(addr: std::net::SocketAddr, request: &str, body: &str) -> (u16, String, String) {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let text = format!(
        "{request}Host: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if let Err(error) = stream.write_all(text.as_bytes()).await {
        assert!(
            matches!(
                error.kind(),
                BrokenPipe | ConnectionReset | ConnectionAborted
            ),
            "write: {error}"
        );
    }
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) => break,
            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            Err(error)
                if matches!(error.kind(), ConnectionReset | ConnectionAborted)
                    && bytes.windows(4).any(|window| window == b"\r\n\r\n") =>
            {
                break;
            }
            Err(error) => panic!("read: {error} after {} bytes", bytes.len()),
        }
    }
    let response = String::from_utf8(bytes).expect("a UTF-8 response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    (status, head.to_ascii_lowercase(), body.to_owned())
}
