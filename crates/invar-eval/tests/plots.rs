//! Every plot writes a parseable SVG and a PNG, atomically (no temporary file left behind).

use invar_eval::abx::PairError;
use invar_eval::plot::{abx_pair_plot, confusion_plot, curves_plot, det_plot, DetCurve};
use invar_eval::verify::det_curve;

#[test]
fn plots_write_svg_and_png() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let det = det_curve(&[1.0, 2.0, 3.0, 4.0], &[0.5, 2.5, 0.0], 100);
    let mut written = det_plot(
        &dir.path().join("det"),
        "DET",
        &[DetCurve::nth(0, "system", det, 1.0 / 3.0)],
    )?;
    let labels: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
    written.extend(confusion_plot(
        &dir.path().join("confusion"),
        &labels,
        &[vec![3, 1], vec![0, 4]],
    )?);
    let pairs = vec![PairError {
        phone_a: "aa".into(),
        phone_b: "iy".into(),
        error: 0.25,
    }];
    written.extend(abx_pair_plot(&dir.path().join("abx"), &pairs, "ABX")?);
    written.extend(curves_plot(
        &dir.path().join("loss"),
        "training",
        "epoch",
        "loss",
        &[(
            "train".to_string(),
            vec![(0.0, 2.0), (1.0, 1.0), (2.0, 0.7)],
        )],
    )?);
    assert_eq!(written.len(), 8);
    for path in &written {
        let bytes = std::fs::read(path)?;
        if path.extension().is_some_and(|e| e == "png") {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
        } else {
            let text = String::from_utf8(bytes)?;
            assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        }
    }
    // The DET legend gives each curve's EER, and the note says what the markers are.
    let svg = std::fs::read_to_string(dir.path().join("det.svg"))?;
    let text = |t: &str| svg.lines().any(|l| l.trim() == t);
    assert!(text("system (EER 33.33 %)"), "no EER in the DET legend");
    assert!(svg.contains("its EER (miss = false alarm)"));
    assert!(text("false alarm probability (%)") && text("miss probability (%)"));
    // The confusion plot prints its row-normalised percentages (3 of 4 = 75).
    let svg = std::fs::read_to_string(dir.path().join("confusion.svg"))?;
    assert!(
        svg.lines().any(|l| l.trim() == "75"),
        "values printed in the cells"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("tmp"))
        .collect();
    assert!(leftovers.is_empty());
    Ok(())
}
