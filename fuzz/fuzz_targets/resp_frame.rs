//! The RESP door's command parser (`floodgate_server::resp::parse_command`), under any
//! caps:
//!
//! * any bytes: never a panic; a command uses at least one byte and no more than given,
//!   holds no more arguments and no longer bulk strings than the caps allow; and the
//!   answer does not depend on how the bytes arrive: a command parsed from a prefix is the
//!   command parsed from the whole, a prefix of a command is incomplete (`Ok(None)`),
//!   and a prefix of an error is incomplete or an error;
//! * any arguments within the caps, encoded as a client encodes them (an array of bulk
//!   strings) and followed by anything: parsed back exactly, using exactly their bytes
//!   (a command whose bulk strings end past `max_command` is never taken);
//! * an error reply is one line, whatever its text.
#![no_main]
use arbitrary::Arbitrary;
use floodgate_server::resp::{Reply, RespLimits, parse_command};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    max_args: u8,
    max_bulk: u16,
    max_line: u16,
    max_command: u32,
    cut: u16,
    data: &'a [u8],
    args: Vec<&'a [u8]>,
    error: String,
}

fuzz_target!(|input: Input<'_>| {
    let limits = RespLimits {
        max_args: usize::from(input.max_args),
        max_bulk: usize::from(input.max_bulk),
        max_line: usize::from(input.max_line),
        max_command: input.max_command as usize,
    };
    let data = input.data;
    let whole = parse_command(data, &limits);
    if let Ok(Some((args, used))) = &whole {
        assert!(
            *used >= 1 && *used <= data.len(),
            "used {used} of {}",
            data.len()
        );
        assert!(args.len() <= limits.max_args);
        assert_eq!(
            parse_command(&data[..*used], &limits),
            whole,
            "the command alone"
        );
    }
    let cut = usize::from(input.cut) % (data.len() + 1);
    let part = parse_command(&data[..cut], &limits);
    match (&part, &whole) {
        (Ok(Some(_)), _) => assert_eq!(
            part,
            whole,
            "a command read from the first {cut} bytes is not the one read from all {}: {:?}",
            data.len(),
            String::from_utf8_lossy(data)
        ),
        (Ok(None), _) => {}
        (Err(_), Err(_)) => {}
        (Err(e), Ok(w)) => panic!(
            "the first {cut} bytes are an error ({e}), all {} are {w:?}: {:?}",
            data.len(),
            String::from_utf8_lossy(data)
        ),
    }
    if let (Ok(Some((_, used))), Ok(None)) = (&whole, &part) {
        assert!(cut < *used, "a whole command's bytes are incomplete");
    }

    let mut out = Vec::new();
    Reply::Error(input.error.clone()).encode(&mut out);
    assert_eq!(out.first(), Some(&b'-'));
    assert!(out.ends_with(b"\r\n"));
    let body = &out[..out.len() - 2];
    assert!(
        !body.contains(&b'\r') && !body.contains(&b'\n'),
        "{:?}",
        input.error
    );

    // what a client sends
    let args: Vec<&[u8]> = input
        .args
        .iter()
        .take(limits.max_args)
        .map(|a| &a[..a.len().min(limits.max_bulk)])
        .collect();
    let mut wire = format!("*{}\r\n", args.len()).into_bytes();
    for a in &args {
        wire.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        wire.extend_from_slice(a);
        wire.extend_from_slice(b"\r\n");
    }
    let len = wire.len();
    if len > limits.max_command {
        // refused on the header of the bulk string that ends past it, never taken
        if !args.is_empty() {
            assert!(
                !matches!(parse_command(&wire, &limits), Ok(Some(_))),
                "a command of {len} bytes taken past max_command {}",
                limits.max_command
            );
        }
        return;
    }
    for k in [0, len / 2, len.saturating_sub(1)] {
        if k < len {
            assert_eq!(
                parse_command(&wire[..k], &limits),
                Ok(None),
                "{k} of {len} bytes"
            );
        }
    }
    wire.extend_from_slice(data);
    let want: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
    assert_eq!(parse_command(&wire, &limits), Ok(Some((want, len))));
});
