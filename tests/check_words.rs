//! scripts/check-words.sh, the check that the guide speaks of the product: each phrase
//! that tells how the project was written, or of a change not kept, fails it; the same
//! page without the phrase passes.

use std::process::Command;

fn check(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(&page, text).unwrap();
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/check-words.sh"
        ))
        .arg(&page)
        .output()
        .expect("bash");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

#[test]
fn each_phrase_fails_the_check_and_the_plain_page_passes() {
    let plain = "Measured on 2026-12-07, 2 cores (Intel Xeon), 24 GiB, commit 49c0309.\n";
    let (ok, said) = check(plain);
    assert!(ok, "{said}");
    for phrase in [
        "as issue 24 asks",
        "the issue's own method",
        "the goal of 2x is met",
        "Goals: at least 2x",
        "measured and not kept",
        "a change not kept",
        "measured and not landed",
        "on this machine",
        "on this 2-core machine",
        "on this VM",
        "on the project's 2-core VM",
        "in this session",
        "a helper wrote it",
        "against the aims of the review",
    ] {
        let (ok, said) = check(&format!("{plain}The figure, {phrase}.\n"));
        assert!(!ok, "{phrase:?} passed the check: {said}");
        assert!(said.contains("page.md"), "{phrase:?}: {said}");
    }
}
