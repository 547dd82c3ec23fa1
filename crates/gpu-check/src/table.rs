//! The one table gpu-check prints.

/// Rows of (what, value, verdict).
#[derive(Default)]
pub struct Table {
    rows: Vec<(String, String, String)>,
}

impl Table {
    /// Adds a row.
    pub fn row(
        &mut self,
        what: impl Into<String>,
        value: impl Into<String>,
        verdict: impl Into<String>,
    ) {
        self.rows.push((what.into(), value.into(), verdict.into()));
    }

    /// Renders the table as aligned text.
    pub fn render(&self) -> String {
        let w0 = self
            .rows
            .iter()
            .map(|r| r.0.len())
            .max()
            .unwrap_or(0)
            .max(4);
        let w1 = self
            .rows
            .iter()
            .map(|r| r.1.len())
            .max()
            .unwrap_or(0)
            .max(5);
        let mut out = format!("{:<w0$}  {:>w1$}  {}\n", "what", "value", "check");
        for (a, b, c) in &self.rows {
            out.push_str(&format!("{a:<w0$}  {b:>w1$}  {c}\n"));
        }
        out
    }
}
