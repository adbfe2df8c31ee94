//! The font invar's plots draw their text with. A subset of DejaVu Sans (`fonts/`, with its licence
//! and the script that made it) is compiled into the binary and registered with plotters' `ab_glyph`
//! text renderer under the families plots ask for, so a plot draws the same text on a machine with no
//! system fonts, and building needs no fontconfig or freetype.
//!
//! Every crate that draws calls [`register_fonts`] before drawing; it does the work once per process.
//! [`Figure`] and [`save`] are the one way figures are drawn and written (SVG and PNG), and
//! [`Heatmap`] the one matrix plot, [`LinePlot`] the one plot of lines; [`style`] holds the sizes,
//! fonts, palette, line styles and legend every figure shares.

mod figure;
mod lines;
pub mod style;

use std::path::PathBuf;
use std::sync::OnceLock;

use plotters::style::{register_font, FontStyle};

pub use figure::{heat, save, Figure, Heatmap, KeyAxis, Scale};
pub use lines::{LinePlot, Panel, Reference, Series};
pub use style::{Dash, LegendEntry, Line, Marker};

/// DejaVu Sans 2.37, subset to Latin, IPA, Greek and the signs plots use (`fonts/make-subset.sh`);
/// licence in `fonts/LICENSE-DejaVu.txt`.
pub static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans-subset.ttf");

/// The font families a plot may name; each is drawn with [`FONT`] (bold and italic fall back to it).
pub const FAMILIES: [&str; 3] = ["sans-serif", "serif", "monospace"];

/// What can go wrong while setting up text for plots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The compiled-in font could not be parsed (a broken build, never bad input).
    #[error("the plot font compiled into invar ({bytes} bytes) cannot be parsed; rebuild invar")]
    Font { bytes: usize },
    /// A figure could not be drawn or written (nothing is left under its final name).
    #[error("{path}: plot not written: {message}")]
    Draw { path: PathBuf, message: String },
}

/// `Result` with invar-plot's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Registers [`FONT`] under every family of [`FAMILIES`]. The first call does the work; later calls
/// return its outcome.
pub fn register_fonts() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        FAMILIES
            .iter()
            .all(|family| register_font(family, FontStyle::Normal, FONT).is_ok())
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Font { bytes: FONT.len() })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use plotters::prelude::*;

    use super::*;

    /// Draws `text` in `family` on a white `w × h` RGB buffer and returns it.
    fn draw(text: &str, family: &str, w: u32, h: u32) -> Vec<u8> {
        register_fonts().unwrap();
        let mut buf = vec![255u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            root.draw_text(text, &(family, 20).into_font().color(&BLACK), (2, 2))
                .unwrap();
            root.present().unwrap();
        }
        buf
    }

    fn dark_pixels(buf: &[u8]) -> usize {
        buf.chunks_exact(3)
            .filter(|p| p.iter().all(|&c| c < 128))
            .count()
    }

    /// Text is drawn from the compiled-in font in every family, without looking at the system's
    /// fonts (the `ab_glyph` renderer has no other source), and glyphs have their real widths.
    #[test]
    fn text_is_drawn_in_every_family() {
        for family in FAMILIES {
            let buf = draw("EER 4.2 %", family, 160, 30);
            assert!(dark_pixels(&buf) > 50, "{family}: almost no ink drawn");
        }
        let blank = draw(" ", "sans-serif", 160, 30);
        assert_eq!(dark_pixels(&blank), 0);
        // Measured by the font: "WWWW" is wider than "iiii" (a fixed-width stand-in would not be).
        let wide = ("sans-serif", 20).into_font().box_size("WWWW").unwrap();
        let narrow = ("sans-serif", 20).into_font().box_size("iiii").unwrap();
        assert!(wide.0 > 2 * narrow.0, "{wide:?} vs {narrow:?}");
    }

    /// Signs the plots' labels use are in the subset: each draws ink of its own shape, not the
    /// empty box every missing glyph shares.
    #[test]
    fn the_signs_plots_use_are_in_the_subset() {
        let missing = draw("\u{E000}", "sans-serif", 40, 30); // a private-use char: not in the font
        for sign in ["−", "×", "λ", "Δ", "≤", "·", "é", "ʃ"] {
            let buf = draw(sign, "sans-serif", 40, 30);
            assert!(dark_pixels(&buf) > 0, "{sign}: no ink");
            assert_ne!(buf, missing, "{sign} is drawn as the missing-glyph box");
        }
    }

    #[test]
    fn registering_twice_is_harmless() {
        register_fonts().unwrap();
        register_fonts().unwrap();
    }
}
