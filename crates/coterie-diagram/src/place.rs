//! Where a diagram's small labels go so that none covers another: each
//! label is offered places in order of preference and takes the first
//! that overlaps no label placed before it, or none (its arrow's tooltip
//! still says it all). Boxes are estimated from the text's length at the
//! diagrams' 9-pixel font, a little wider than any glyph's advance, so a
//! placement that does not collide here does not collide on screen.

/// A label's text box: left, top, right, bottom, in pixels.
type Box = (f64, f64, f64, f64);

/// The advance of one character of a 9-pixel label, rounded up.
pub const CHAR_PX: f64 = 6.0;
/// A label's height above its baseline, and below it.
const ASCENT: f64 = 8.0;
const DESCENT: f64 = 2.0;

/// The labels placed so far.
#[derive(Default)]
pub struct Placed {
    boxes: Vec<Box>,
}

impl Placed {
    /// The box of `text` written with its baseline starting at `(x, y)`.
    fn text_box(text: &str, x: f64, y: f64) -> Box {
        (x, y - ASCENT, x + CHAR_PX * text.chars().count() as f64, y + DESCENT)
    }

    fn free(&self, b: Box) -> bool {
        self.boxes.iter().all(|o| b.2 <= o.0 || o.2 <= b.0 || b.3 <= o.1 || o.3 <= b.1)
    }

    /// Keeps `text` at `(x, y)`, whatever it covers (a label that must be
    /// drawn where it is, as a fence under its bar).
    pub fn keep(&mut self, text: &str, x: f64, y: f64) {
        self.boxes.push(Placed::text_box(text, x, y));
    }

    /// The first of `places` where `text` covers no label placed before,
    /// now kept; `None` if every one would.
    pub fn place(
        &mut self,
        text: &str,
        places: impl IntoIterator<Item = (f64, f64)>,
    ) -> Option<(f64, f64)> {
        let (x, y) = places.into_iter().find(|&(x, y)| self.free(Placed::text_box(text, x, y)))?;
        self.keep(text, x, y);
        Some((x, y))
    }
}

#[cfg(test)]
mod tests {
    use super::Placed;

    #[test]
    fn a_label_moves_off_one_it_would_cover_and_gives_up_when_it_cannot() {
        let mut placed = Placed::default();
        assert_eq!(placed.place("REPLY", [(100.0, 100.0)]), Some((100.0, 100.0)));
        // Over REPLY: the next place, ten pixels lower, is free.
        let second = placed.place("REQUEST(266,1)", [(102.0, 100.0), (102.0, 111.0)]);
        assert_eq!(second, Some((102.0, 111.0)));
        assert_eq!(placed.place("GRANT", [(101.0, 104.0)]), None);
        // Beside, not over: free.
        assert!(placed.place("X", [(131.0, 100.0)]).is_some());
    }
}
