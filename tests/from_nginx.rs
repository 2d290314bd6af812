//! nginx and `floodgate proxy` side by side: the book's nginx examples
//! (docs/from-nginx.md) run in a real nginx, their `floodgate convert nginx` output in
//! the real `floodgate proxy`, both in front of one backend, and the same requests get
//! the same answers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use floodgate_book::blocks;

mod common;
use common::{Proc, free_ports};

const BIN: &str = env!("CARGO_BIN_EXE_floodgate");

/// The nginx binary (Debian package nginx, installed by scripts/setup.sh).
fn nginx() -> &'static str {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(p).exists() {
            return p;
        }
    }
    panic!("nginx is not installed (Debian package nginx; scripts/setup.sh installs it)");
}

/// The body of the book's `file=NAME` block on docs/from-nginx.md.
fn book_file(name: &str) -> String {
    blocks()
        .unwrap()
        .into_iter()
        .find(|b| b.page == "from-nginx.md" && b.attr("file") == Some(name))
        .unwrap_or_else(|| panic!("docs/from-nginx.md has no file={name} block"))
        .body
}

/// A backend answering `200 ok` to every request, one thread per connection.
fn backend() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
    addr
}

fn serve(mut s: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // answer each request head on the connection (keep-alive from floodgate)
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        buf.drain(..end);
        if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

/// `GET path` on a fresh connection: the status and how long the answer took.
fn get(addr: SocketAddr, path: &str) -> (u16, Duration) {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    let took = start.elapsed();
    let status = std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap();
    (status, took)
}

/// Wait until `addr` accepts connections, or fail if `p` exits first.
fn wait_up(p: &mut Proc, addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        if let Some(st) = p.0.try_wait().unwrap() {
            panic!("{what} exited ({st}) before listening on {addr}");
        }
        assert!(Instant::now() < deadline, "{what}: nothing on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// nginx and floodgate both running the book's `name` example, in front of one backend.
struct Pair {
    nginx: SocketAddr,
    floodgate: SocketAddr,
    _procs: (Proc, Proc),
    _dir: tempfile::TempDir,
}

fn start(name: &str) -> Pair {
    let conf = book_file(name);
    let dir = tempfile::tempdir().unwrap();
    let upstream = backend();
    let [n, f] = free_ports::<2>();
    // floodgate: the book's file converted as it is; the ports come from the flags
    let src = dir.path().join(name);
    std::fs::write(&src, &conf).unwrap();
    let out = Command::new(BIN)
        .args(["convert", "nginx"])
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = dir.path().join("floodgate.toml");
    std::fs::write(&toml, &out.stdout).unwrap();
    let mut fg = Proc(
        Command::new(BIN)
            .args(["proxy", "--threads", "1", "--config"])
            .arg(&toml)
            .args(["--listen", &f.to_string()])
            .args(["--upstream", &format!("http://{upstream}")])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    // nginx: the same file, its ports moved, its files kept in the test's directory
    let d = dir.path().display();
    let nconf = conf
        .replace("127.0.0.1:8080", &n.to_string())
        .replace("127.0.0.1:9000", &upstream.to_string())
        .replacen(
            "http {",
            &format!(
                "http {{\n    access_log off;\n    client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n    fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    scgi_temp_path {d}/scgi;\n"
            ),
            1,
        );
    let npath = dir.path().join("nginx-run.conf");
    std::fs::write(&npath, nconf).unwrap();
    let mut ng = Proc(
        Command::new(nginx())
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&npath)
            .args([
                "-e",
                "stderr",
                "-g",
                &format!("daemon off; master_process off; pid {d}/nginx.pid;"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    wait_up(&mut ng, n, "nginx");
    wait_up(&mut fg, f, "floodgate proxy");
    Pair {
        nginx: n,
        floodgate: f,
        _procs: (ng, fg),
        _dir: dir,
    }
}

#[test]
fn a_burst_then_a_pause_gets_the_same_answers_from_nginx_and_floodgate() {
    let p = start("nginx.conf");
    let (mut from_nginx, mut from_floodgate) = (Vec::new(), Vec::new());
    let mut send = |n: usize| {
        for _ in 0..n {
            from_nginx.push(get(p.nginx, "/").0);
            from_floodgate.push(get(p.floodgate, "/").0);
        }
    };
    send(8);
    std::thread::sleep(Duration::from_millis(2300));
    send(4);
    // rate=1r/s burst=5 nodelay: 6 at once, then 2.3 s drain 2 (and a part)
    let expected = [200, 200, 200, 200, 200, 200, 429, 429, 200, 200, 429, 429];
    assert_eq!(from_nginx, expected, "nginx");
    assert_eq!(from_floodgate, from_nginx, "floodgate against nginx");
}

/// 14 requests at once: the statuses and the held delays, sorted.
fn at_once(addr: SocketAddr) -> (Vec<u16>, Vec<Duration>) {
    let threads: Vec<_> = (0..14)
        .map(|_| std::thread::spawn(move || get(addr, "/api/x")))
        .collect();
    let mut answers: Vec<(u16, Duration)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    answers.sort_by_key(|a| a.1);
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    statuses.sort();
    let admitted = answers.iter().filter(|a| a.0 == 200).map(|a| a.1).collect();
    (statuses, admitted)
}

#[test]
fn delayed_requests_are_held_alike_and_the_denial_is_nginx_503() {
    let p = start("api.conf");
    // outside /api/: no limit on either side (nginx has no location there: 404)
    for _ in 0..20 {
        assert_eq!(get(p.nginx, "/other").0, 404);
        assert_eq!(get(p.floodgate, "/other").0, 200);
    }
    let (ns, nd) = at_once(p.nginx);
    std::thread::sleep(Duration::from_millis(100));
    let (fs, fd) = at_once(p.floodgate);
    let mut expected = vec![200; 13];
    expected.push(503);
    assert_eq!(ns, expected, "nginx");
    assert_eq!(fs, expected, "floodgate");
    // rate=5r/s burst=12 delay=8: 9 at once, then held 200, 400, 600, 800 ms
    for (who, d) in [("nginx", &nd), ("floodgate", &fd)] {
        for (i, t) in d.iter().enumerate() {
            let want = Duration::from_millis(200 * (i.saturating_sub(8)) as u64);
            let lo = want.saturating_sub(Duration::from_millis(60));
            let hi = want + Duration::from_millis(250);
            assert!(
                *t >= lo && *t <= hi,
                "{who}: admitted request {i} answered after {t:?}, expected about {want:?} ({d:?})"
            );
        }
    }
}

#[test]
fn every_book_example_converts_to_a_file_floodgate_proxy_loads() {
    for name in ["nginx.conf", "api.conf"] {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join(name);
        std::fs::write(&src, book_file(name)).unwrap();
        let out = Command::new(BIN)
            .args(["convert", "nginx"])
            .arg(&src)
            .output()
            .unwrap();
        assert!(out.status.success());
        let toml = dir.path().join("floodgate.toml");
        std::fs::write(&toml, &out.stdout).unwrap();
        let check = Command::new(BIN)
            .args(["proxy", "--check-config", "--config"])
            .arg(&toml)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        // nginx itself accepts the book's file (nginx -t)
        let d = dir.path().display();
        let t = Command::new(nginx())
            .arg("-t")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&src)
            .args(["-e", "stderr", "-g", &format!("pid {d}/nginx.pid;")])
            .output()
            .unwrap();
        assert!(
            t.status.success(),
            "nginx -t {name}: {}",
            String::from_utf8_lossy(&t.stderr)
        );
    }
}
