//! A plain aligned-column table for terminals: numbers right-aligned, text left-aligned.

pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "row width matches header");
        self.rows.push(cells);
    }

    fn numeric(s: &str) -> bool {
        let t = s.trim_end_matches(['%', 'x', 's']).trim_end_matches(" u").trim_end_matches(" m");
        !s.is_empty() && (t.parse::<f64>().is_ok() || s == "-")
    }

    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &Vec<String>, out: &mut String, header: bool| {
            let mut parts = Vec::with_capacity(cols);
            for (i, c) in cells.iter().enumerate() {
                let pad = width[i] - c.chars().count();
                if !header && Self::numeric(c) {
                    parts.push(format!("{}{}", " ".repeat(pad), c));
                } else {
                    parts.push(format!("{}{}", c, " ".repeat(pad)));
                }
            }
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out, true);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for r in &self.rows {
            line(r, &mut out, false);
        }
        out
    }
}
