//! `tollgate simulate` run by the tests on a config and a log of their
//! own, in a scratch directory under the test target directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// A fresh scratch directory `name` (emptied if it was there).
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `simulate -c DIR/gateway.yaml DIR/requests.log [--json]` with `config`
/// and `log` written there first; its output, whatever its exit.
pub fn simulate(dir: &Path, config: &str, log: &str, json: bool) -> Output {
    let (cfg, requests) = (dir.join("gateway.yaml"), dir.join("requests.log"));
    std::fs::write(&cfg, config).unwrap();
    std::fs::write(&requests, log).unwrap();
    let mut args = vec![
        "simulate",
        "-c",
        cfg.to_str().unwrap(),
        requests.to_str().unwrap(),
    ];
    if json {
        args.push("--json");
    }
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap()
}

/// [`simulate`] with `--json`, which must succeed: its report.
pub fn report(dir: &Path, config: &str, log: &str) -> Value {
    let out = simulate(dir, config, log, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
