//! The C ABI: c/example.c, compiled against include/smartcon.h and linked with
//! libsmartcon.so, writes and reads a file through a port and checks data, end of file,
//! EINVAL on a misaligned O_DIRECT buffer and the counters.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

#[test]
fn the_c_example_runs_against_the_library() {
    let Some(cc) = cc() else {
        eprintln!("skipped: no C compiler (cc, gcc or clang) on PATH");
        return;
    };
    let dir = temp_dir("capi");
    if !direct_io_works(&dir) {
        eprintln!("skipped: {} refuses O_DIRECT", dir.display());
        return;
    }
    let lib = library();
    let lib_dir = lib.parent().expect("library dir");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include");
    let exe = compile(
        &cc,
        "example.c",
        &dir,
        &[
            &format!("-I{}", include.display()),
            &format!("-L{}", lib_dir.display()),
            "-lsmartcon",
            &format!("-Wl,-rpath,{}", lib_dir.display()),
        ],
    );
    let out = Command::new(&exe).arg(dir.join("data")).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the example failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("bad blocks: 0"), "{stdout}");
    assert!(stdout.contains("errno 22"), "{stdout}");
    assert!(stdout.contains("ios 129 "), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
