//! Every committed fuzz input, replayed through the fuzz targets' own
//! invariant checks (`tollgate::fuzzing`): the seed corpora under
//! `fuzz/corpus/<target>/` and the inputs that once broke an invariant
//! under `fuzz/regressions/<target>/`. Fuzzing itself runs outside CI
//! (`fuzz/run`, README "Fuzzing"); this keeps what it found fixed and the
//! invariants checked on every `tests/run`.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use tollgate::fuzzing;

/// Runs `check` on every file of the target's seed corpus and regressions
/// and names every file that breaks an invariant. The seed corpus must not
/// be empty.
fn replay(target: &str, check: impl Fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let (mut seeds, mut broken) = (0, Vec::new());
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .map(|e| e.expect("a directory entry").path())
            .collect();
        files.sort();
        for file in files {
            let data = std::fs::read(&file).expect("a readable input");
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| check(&data)));
            if outcome.is_err() {
                broken.push(file.display().to_string());
            }
            seeds += usize::from(dir == "corpus");
        }
    }
    assert!(seeds > 0, "fuzz/corpus/{target}/ holds the seeds");
    assert!(
        broken.is_empty(),
        "these inputs break an invariant: {broken:#?}"
    );
}

/// One test per target whose inputs need no more than its own checks.
macro_rules! replay_tests {
    ($($target:ident),*) => {$(
        #[test]
        fn $target() {
            replay(stringify!($target), fuzzing::$target);
        }
    )*};
}

replay_tests!(
    config,
    path,
    xff,
    client_key,
    h1_framing,
    llm_request,
    llm_stream,
    jwt
);

#[test]
fn ratelimit_headers() {
    // As the fuzz target: the fields also parse with the sfv crate.
    replay("ratelimit_headers", |data| {
        for field in fuzzing::ratelimit_headers(data) {
            let parsed = sfv::Parser::new(field.as_bytes()).parse::<sfv::List>();
            assert!(parsed.is_ok(), "{field:?}: {parsed:?}");
        }
    });
}
