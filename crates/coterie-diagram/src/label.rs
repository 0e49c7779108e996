//! Short labels for arrows, from a message's full text (the algorithms'
//! `Debug` form, as `Engine::describe` gives it): the variant's name in
//! capitals, the request's timestamp and node, a fence, an epoch. So
//! `Request { stamp: Stamp { ts: 3, node: NodeId(2) }, .. }` reads
//! `REQUEST(3,2)`, a grant `GRANT f=65538`, a bully announcement
//! `COORDINATOR e1.3`: the textbooks' notation.

/// The short label of a message whose full text is `text`.
pub fn short(text: &str) -> String {
    let name: String = text.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
    let mut label = capitals(&name);
    if let Some(ts) = number_after(text, "stamp: Stamp { ts: ") {
        let node = after(text, "stamp: Stamp { ts: ")
            .and_then(|rest| number_after(rest, "node: NodeId("))
            .map_or(String::new(), |n| format!(",{n}"));
        label.push_str(&format!("({ts}{node})"));
    }
    if let Some(fence) = number_after(text, "fence: Fence(") {
        label.push_str(&format!(" f={}", fence_label(fence)));
    }
    if let Some(epoch) = number_after(text, "epoch: Epoch(").filter(|&e| e > 0) {
        label.push_str(&format!(" e{}.{}", epoch >> 16, epoch & 0xffff));
    }
    label
}

/// A fence as `major:minor` (the epoch or clock it was cut from, and the
/// grant's number under it): shorter than the token's decimal, which the
/// tooltips keep.
pub fn fence_label(fence: u64) -> String {
    let f = coterie_core::Fence(fence);
    format!("{}:{}", f.major(), f.minor())
}

/// `StateReport` → `STATE_REPORT`.
fn capitals(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.find(marker).map(|at| &text[at + marker.len()..])
}

/// The decimal number right after the first `marker` in `text`.
fn number_after(text: &str, marker: &str) -> Option<u64> {
    let rest = after(text, marker)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn the_textbooks_notation() {
        let request =
            "Request { stamp: Stamp { ts: 3, node: NodeId(2) }, place: Place { rank: 0 } }";
        assert_eq!(short(request), "REQUEST(3,2)");
        assert_eq!(short("Reply { to: Stamp { ts: 1, node: NodeId(2) }, clock: 1 }"), "REPLY");
        assert_eq!(
            short("Grant { epoch: Epoch(65539), fence: Fence(65538), clock: 4 }"),
            "GRANT f=0:65538 e1.3"
        );
        assert_eq!(short("Coordinator { epoch: Epoch(65539) }"), "COORDINATOR e1.3");
        assert_eq!(short("Election { epoch: Epoch(0) }"), "ELECTION");
        assert_eq!(short("StateQuery { epoch: Epoch(131074) }"), "STATE_QUERY e2.2");
        assert_eq!(short("Yield"), "YIELD");
        assert_eq!(short("Grant { fence: Fence(16777218) }"), "GRANT f=1:2");
    }
}
