//! Every path a command writes or reads goes through here (issue 29), on top of
//! `smartcon_util::paths`: outputs are claimed first thing in a command's `run`, before any
//! measuring, and committed after the results are printed, so a file that cannot be written
//! never costs the results; inputs are opened without blocking and must be regular files.
//!
//! Path flags say their role in their value name, which `--help` shows and the CLI's
//! path matrix test (tests/path_matrix.rs) reads from the command tree that
//! [`dump_tree_if_asked`] prints: `OUT_FILE` (a new file), `OUT_DIR` (a new or empty
//! directory), `FILE` (an input, a regular file), `DIR` (a directory smartcon works in).
//! A path flag without one of these is reported by that test, so a new command cannot
//! forget its paths.

use std::path::{Path, PathBuf};

pub use smartcon_util::paths::{Existing, OutDir, OutFile, PathError};

/// Claims a user's output file given with `flag` (refused if anything is there).
pub fn out_file(flag: &str, path: Option<&Path>) -> Result<Option<OutFile>, PathError> {
    path.map(|p| OutFile::claim(flag, p, Existing::Refuse)).transpose()
}

/// Claims a file of smartcon's own store (a profile, host.json): its directory is created
/// if need be, and an existing regular file is replaced atomically on commit.
pub fn store_file(path: &Path) -> Result<OutFile, PathError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| PathError::new("", dir, format!("cannot create: {e}")))?;
    }
    OutFile::claim("", path, Existing::Replace)
}

/// The output, unless the run was interrupted: then it is dropped (removed) with a note,
/// as a file of a cut-short run would hold part of the results (the terminal has them).
pub fn unless_interrupted(out: Option<OutFile>) -> Option<OutFile> {
    let out = out?;
    if crate::common::interrupted() {
        eprintln!("smartcon: interrupted: {} not written", smartcon_util::paths::escape(out.path()));
        return None;
    }
    Some(out)
}

/// Claims a report directory given with `flag`.
pub fn out_dir(flag: &str, path: &Path) -> Result<OutDir, PathError> {
    OutDir::claim(flag, path)
}

/// Checks an input file given with `flag` before any work: it must be a regular file
/// (`-`, standard input, where `stdin_ok`).
pub fn input(flag: &str, path: &Path, stdin_ok: bool) -> Result<(), PathError> {
    if stdin_ok && path.as_os_str() == "-" {
        return Ok(());
    }
    smartcon_util::paths::open_input(flag, path).map(drop)
}

/// At start: claims are recorded under `$SMARTCON_HOME/outputs` for `smartcon cleanup`,
/// and `SMARTCON_CLI_TREE=1` prints the command tree (see [`dump_tree_if_asked`]).
pub fn init(root: &clap::Command) {
    smartcon_util::paths::set_records_dir(records_dir());
    dump_tree_if_asked(root);
}

/// Where claimed outputs are recorded.
pub fn records_dir() -> PathBuf {
    crate::common::smartcon_home().join("outputs")
}

/// With `SMARTCON_CLI_TREE=1`, prints every argument of every subcommand as JSON Lines and
/// exits (for the path matrix test; not a user interface).
fn dump_tree_if_asked(root: &clap::Command) {
    if std::env::var_os("SMARTCON_CLI_TREE").is_none() {
        return;
    }
    fn walk(cmd: &clap::Command, prefix: &[String]) {
        let mut names = prefix.to_vec();
        names.push(cmd.get_name().to_string());
        for arg in cmd.get_arguments() {
            let record = serde_json::json!({
                "command": names[1..].join(" "),
                "id": arg.get_id().as_str(),
                "long": arg.get_long(),
                "positional": arg.is_positional(),
                "last": arg.is_last_set(),
                "required": arg.is_required_set(),
                "takes_value": arg.get_action().takes_values(),
                "hint": format!("{:?}", arg.get_value_hint()),
                "value_name": arg.get_value_names().and_then(|v| v.first()).map(|s| s.as_str().to_string()),
                "subcommands": cmd.has_subcommands(),
            });
            println!("{record}");
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &names);
        }
    }
    let mut root = root.clone();
    root.build();
    walk(&root, &[]);
    std::process::exit(0);
}
