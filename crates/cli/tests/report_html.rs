//! `report.html` as a person sees it: `smartcon evaluate --tiny` writes the page, the test
//! checks that every plot of the folder is inlined with a caption, then opens the page in a
//! real headless browser (Debian's chromium) and checks the screenshot shows the page: its
//! header band and the plots' colours, not a blank or an error page. Skipped, saying why,
//! where chromium is absent. No timing is asserted; the browser gets a generous deadline
//! only so a hung browser ends the test instead of the run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smartcon-htmltest-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |d| d.join(name)))
        .find(|p| p.is_file())
}

/// Takes a screenshot of `page` into `png`; false (with the browser's words on stderr)
/// when it made none.
fn screenshot(browser: &Path, page: &Path, png: &Path, profile: &Path) -> bool {
    let mut child = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1000"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            if !(status.success() && png.exists()) {
                eprintln!("chromium failed ({status}): {err}");
                return false;
            }
            return true;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("chromium did not finish within 120 s");
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn report_html_holds_every_plot_and_renders_in_a_browser() {
    let dir = scratch("evaluate");
    let report = dir.join("report");
    let out = Command::new(env!("CARGO_BIN_EXE_smartcon"))
        .env("SMARTCON_HOME", &dir)
        .args(["evaluate", "--tiny", "--duration", "20ms", "--out", report.to_str().unwrap()])
        .output()
        .expect("run smartcon");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page_path = report.join("report.html");
    let page = std::fs::read_to_string(&page_path).expect("evaluate writes report.html");
    let svgs: Vec<String> = std::fs::read_dir(&report)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    assert!(svgs.len() >= 5, "plots written: {svgs:?}");
    assert!(svgs.iter().any(|n| n.starts_with("pareto-")), "the Pareto picture is among the plots: {svgs:?}");
    assert_eq!(page.matches("<svg class=\"plot\"").count(), svgs.len(), "every plot inlined once");
    assert_eq!(page.matches("<figcaption>").count(), svgs.len(), "every plot has a caption");
    for name in &svgs {
        assert!(page.contains(&format!("<figure id=\"{name}\">")), "{name} is on the page");
    }
    assert!(page.contains("<h2>Criteria, measured in this run</h2>"), "the summary is rendered to HTML");
    assert!(page.contains("<table>") && page.contains("<pre><code>"));

    let Some(browser) = chromium() else {
        eprintln!("skipped the browser check: no chromium on PATH (scripts/test.sh installs it as root on Debian)");
        return;
    };
    let png_path = dir.join("report.png");
    assert!(
        screenshot(&browser, &page_path, &png_path, &dir.join("chromium-profile")),
        "chromium is installed but made no screenshot of {}",
        page_path.display()
    );
    let decoder = png::Decoder::new(std::fs::File::open(&png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    assert!(channels >= 3, "an RGB screenshot, got {:?}", info.color_type);
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    let total = pixels.len() as f64;
    let near = |p: &[u8], c: [u8; 3]| (0..3).all(|i| p[i].abs_diff(c[i]) <= 12);
    let non_white = pixels.iter().filter(|p| p[..3].iter().any(|v| *v < 235)).count() as f64 / total;
    // The header band (#2c3e50) says it is our page and not a browser error page; the
    // plots' first colours say the inline SVG was drawn.
    let header = pixels.iter().filter(|p| near(p, [0x2c, 0x3e, 0x50])).count() as f64 / total;
    let plot_colours = pixels.iter().filter(|p| near(p, [31, 119, 180]) || near(p, [214, 39, 40])).count();
    eprintln!(
        "screenshot {}x{}: {:.1}% not white, header {:.1}%, {plot_colours} plot-coloured pixels",
        info.width,
        info.height,
        100.0 * non_white,
        100.0 * header
    );
    assert!(non_white > 0.05, "the page is not blank: {:.1}% of its pixels are not white", 100.0 * non_white);
    assert!(header > 0.02, "the header band shows ({:.1}% of the pixels)", 100.0 * header);
    assert!(plot_colours > 200, "the plots are drawn ({plot_colours} pixels in their colours)");
    // Kept for a look when asked (SMARTCON_KEEP_SCREENSHOT=PATH), else removed with the rest.
    if let Some(keep) = std::env::var_os("SMARTCON_KEEP_SCREENSHOT") {
        std::fs::copy(&png_path, keep).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
