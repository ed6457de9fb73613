//! The benchmark dataset (design.md §3): a TPC-H-like `orders`/`lineitem`
//! pair generated inside PostgreSQL by `dataset.sql` from a scale factor and
//! a seed, plus [`CHECKSUM_SQL`], a one-value fingerprint of the data that
//! tests compare across replicas.
//!
//! Generation is deterministic: every value is a hash of its row key and the
//! seed, so the same (scale, seed) yields the same rows on any server. The
//! local backend loads it once into a template data directory and copies
//! that, so replicas are byte-identical anyway.

/// The generation script, with `{{...}}` placeholders (see [`render`]).
pub const DATASET_SQL: &str = include_str!("dataset.sql");

/// Query returning one text value, `orders=<count>:<hash> lineitem=<count>:<hash>`,
/// where each hash sums a 64-bit hash of every row's text form (order
/// independent, no sort). Equal on replicas that hold the same data.
pub const CHECKSUM_SQL: &str = "SELECT 'orders=' || (SELECT count(*) || ':' || \
     coalesce(sum(hashtextextended(o::text, 0)::numeric), 0) FROM orders o) \
     || ' lineitem=' || (SELECT count(*) || ':' || \
     coalesce(sum(hashtextextended(l::text, 0)::numeric), 0) FROM lineitem l)";

/// Rows of `orders` at scale factor 1 (TPC-H); `lineitem` has about 4 per order.
pub const ORDERS_PER_SCALE: f64 = 1_500_000.0;

/// Rows of `orders` at `scale` (at least 1).
pub fn orders_rows(scale: f64) -> u64 {
    ((ORDERS_PER_SCALE * scale).round() as u64).max(1)
}

/// The generation script for `scale` and `seed`, split into statements that
/// are each run on their own (so `VACUUM` runs outside a transaction).
pub fn render(scale: f64, seed: u64) -> Vec<String> {
    let per = |n: f64| ((n * scale).round() as u64).max(1).to_string();
    // The seed goes into hashint8extended, which takes a signed bigint.
    let sql = DATASET_SQL
        .replace("{{orders}}", &orders_rows(scale).to_string())
        .replace("{{customers}}", &per(150_000.0))
        .replace("{{parts}}", &per(200_000.0))
        .replace("{{suppliers}}", &per(10_000.0))
        .replace("{{seed}}", &(seed as i64).to_string());
    split_statements(&sql)
}

/// Splits a script at lines ending with `;`, dropping `--` comment lines.
fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in sql.lines() {
        if line.trim_start().starts_with("--") || line.trim().is_empty() {
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_follow_scale() {
        for (scale, want) in [(1.0, 1_500_000), (0.05, 75_000), (0.002, 3_000), (1e-9, 1)] {
            assert_eq!(orders_rows(scale), want, "scale {scale}");
        }
    }

    #[test]
    fn render_substitutes_every_placeholder() {
        let stmts = render(0.05, u64::MAX);
        assert!(stmts.iter().all(|s| !s.contains("{{")), "placeholder left");
        assert!(stmts.iter().any(|s| s.contains("generate_series(1::bigint, 75000)")));
        assert!(stmts.iter().any(|s| s.contains("hashint8extended(n * 64 + salt, -1)")));
        assert!(stmts.iter().all(|s| s.trim_end().ends_with(';')));
        assert!(stmts.iter().any(|s| s.starts_with("VACUUM")));
        assert_eq!(render(0.05, 42), render(0.05, 42));
    }

    #[test]
    fn comments_and_blank_lines_are_dropped() {
        let s = split_statements("-- c\nSELECT 1;\n\nSELECT\n  2;\n-- end\n");
        assert_eq!(s, vec!["SELECT 1;\n".to_string(), "SELECT\n  2;\n".to_string()]);
    }
}
