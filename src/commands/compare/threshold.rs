//! The regression gate of `plbbench compare --threshold EXPR`: parsing an
//! expression and checking it against a baseline folder. Pure (no I/O), so
//! the grammar is pinned by table tests and fuzzed in tests/fuzz_parsers.rs.
//!
//! ```text
//! EXPR      := [SELECTOR "/"] CLASS "." PHASE "." METRIC OP CHANGE
//! SELECTOR  := STRATEGY "/" MIX "/" FAULTS      each may be "*" (any)
//! CLASS     := premium | freemium | p | f | *
//! PHASE     := baseline | down1 | down2 | rejoin1 | ... | *   (warm-up excluded)
//! METRIC    := goodput_qps | retention | p95_ms | ... (or an alias: p95, goodput, ...)
//! OP        := < | <= | > | >=
//! CHANGE    := ("+" | "-") NUMBER ["%"]
//! ```
//!
//! CHANGE is the change of the compared folder against the baseline: with
//! `%` relative, `(new / base - 1) * 100`; without, absolute, `new - base`.
//! `premium.down2.p95_ms<+10%` holds when Premium p95 in `down2` rose by
//! less than 10 %; `premium.down1.retention>-0.05` when retention fell by
//! less than 0.05. Without a selector the expression applies to every cell
//! of the baseline (every strategy, mix and fault preset of an experiment).

use super::model::{partner, relative_change, Folder, Metric, Selection};
use crate::core::model::Class;
use crate::core::phases::WARMUP;
use serde::Serialize;
use std::fmt;

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Op {
    /// `<`
    #[serde(rename = "<")]
    Lt,
    /// `<=`
    #[serde(rename = "<=")]
    Le,
    /// `>`
    #[serde(rename = ">")]
    Gt,
    /// `>=`
    #[serde(rename = ">=")]
    Ge,
}

impl Op {
    /// Whether `change OP limit` holds (to 9 decimal places, so that binary
    /// noise such as 19.999999999999996 meets `<=+20%`).
    pub fn holds(self, change: f64, limit: f64) -> bool {
        let r = |x: f64| if x.is_finite() { (x * 1e9).round() / 1e9 } else { x };
        let (c, l) = (r(change), r(limit));
        match self {
            Op::Lt => c < l,
            Op::Le => c <= l,
            Op::Gt => c > l,
            Op::Ge => c >= l,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        })
    }
}

/// The limit on the change.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Limit {
    /// Signed limit.
    pub value: f64,
    /// True for a percent change, false for an absolute one.
    pub relative: bool,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:+}{}", self.value, if self.relative { "%" } else { "" })
    }
}

/// One parsed `--threshold`. `None` in a selector field, class or phase means any.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// The expression as given.
    pub text: String,
    /// Strategy, if selected.
    pub strategy: Option<String>,
    /// Mix, if selected.
    pub mix: Option<String>,
    /// Fault preset or file, if selected.
    pub faults: Option<String>,
    /// Class, if selected.
    pub class: Option<Class>,
    /// Phase, if selected.
    pub phase: Option<String>,
    /// Metric.
    pub metric: Metric,
    /// Operator.
    pub op: Op,
    /// Limit on the change.
    pub limit: Limit,
}

/// Why an expression does not parse (one line, shown after the expression).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// No `<`, `<=`, `>` or `>=`.
    #[error("no comparison operator (<, <=, >, >=), as in premium.down2.p95_ms<+10%")]
    NoOperator,
    /// The left side is not `class.phase.metric`.
    #[error("`{0}` is not class.phase.metric, as in premium.down2.p95_ms")]
    Path(String),
    /// The selector is not `strategy/mix/faults`.
    #[error("selector `{0}` is not strategy/mix/faults, as in plb/25:75/cascade (use * for any)")]
    Selector(String),
    /// Unknown class.
    #[error("unknown class `{0}` (expected premium, freemium or *)")]
    Class(String),
    /// Unknown metric.
    #[error("unknown metric `{0}` (expected one of {1})")]
    Metric(String, String),
    /// Empty phase name.
    #[error("empty phase name")]
    Phase,
    /// The change is not a signed number with an optional `%`.
    #[error("limit `{0}` is not a signed change such as +10%, -5% or -0.05")]
    Limit(String),
}

impl Threshold {
    /// Parses one expression (see the module documentation).
    pub fn parse(text: &str) -> Result<Threshold, ParseError> {
        let at = text.find(['<', '>']).ok_or(ParseError::NoOperator)?;
        let (left, rest) = text.split_at(at);
        let (op, right) = match (rest.as_bytes()[0], rest.as_bytes().get(1)) {
            (b'<', Some(b'=')) => (Op::Le, &rest[2..]),
            (b'>', Some(b'=')) => (Op::Ge, &rest[2..]),
            (b'<', _) => (Op::Lt, &rest[1..]),
            _ => (Op::Gt, &rest[1..]),
        };
        let limit = parse_limit(right.trim())?;
        let left = left.trim();
        let (selector, path) = match left.rsplit_once('/') {
            Some((s, p)) => (Some(s), p),
            None => (None, left),
        };
        let (strategy, mix, faults) = match selector {
            None => (None, None, None),
            Some(s) => {
                let parts: Vec<&str> = s.splitn(3, '/').map(str::trim).collect();
                if parts.len() != 3 || parts.iter().any(|p| p.is_empty()) {
                    return Err(ParseError::Selector(s.to_string()));
                }
                (wildcard(parts[0]), wildcard(parts[1]), wildcard(parts[2]))
            }
        };
        let fields: Vec<&str> = path.split('.').map(str::trim).collect();
        let [class, phase, metric] = fields[..] else { return Err(ParseError::Path(path.trim().to_string())) };
        let class = match class.to_ascii_lowercase().as_str() {
            "premium" | "p" => Some(Class::P),
            "freemium" | "f" => Some(Class::F),
            "*" => None,
            _ => return Err(ParseError::Class(class.to_string())),
        };
        if phase.is_empty() {
            return Err(ParseError::Phase);
        }
        let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        let metric = Metric::parse(metric).ok_or_else(|| ParseError::Metric(metric.to_string(), names.join(", ")))?;
        Ok(Threshold {
            text: text.trim().to_string(),
            strategy,
            mix,
            faults,
            class,
            phase: wildcard(phase),
            metric,
            op,
            limit,
        })
    }

    /// True when the selector admits `sel`.
    pub fn selects(&self, sel: &Selection) -> bool {
        let ok = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        ok(&self.strategy, &sel.strategy) && ok(&self.mix, &sel.mix) && ok(&self.faults, &sel.faults)
    }
}

/// `None` for the wildcard `*`.
fn wildcard(s: &str) -> Option<String> {
    (s != "*").then(|| s.to_string())
}

fn parse_limit(s: &str) -> Result<Limit, ParseError> {
    let bad = || ParseError::Limit(s.to_string());
    let (sign, rest) = match s.as_bytes().first() {
        Some(b'+') => (1.0, &s[1..]),
        Some(b'-') => (-1.0, &s[1..]),
        _ => return Err(bad()),
    };
    let (num, relative) = match rest.strip_suffix('%') {
        Some(n) => (n.trim_end(), true),
        None => (rest, false),
    };
    let plain = !num.is_empty()
        && num.chars().all(|c| c.is_ascii_digit() || c == '.')
        && num.chars().any(|c| c.is_ascii_digit());
    let v: f64 = if plain { num.parse().map_err(|_| bad())? } else { return Err(bad()) };
    Ok(Limit { value: sign * v, relative })
}

/// The outcome of one threshold on one cell of one compared folder.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// The expression.
    pub expr: String,
    /// The compared folder.
    pub folder: String,
    /// The baseline's cell, `strategy/mix/faults`.
    pub selection: String,
    /// Class name.
    pub class: String,
    /// Phase.
    pub phase: String,
    /// Metric.
    pub metric: Metric,
    /// The baseline's value (`None`: it has none, so there is nothing to
    /// regress from and the check holds).
    pub baseline: Option<f64>,
    /// The compared folder's value (`None`: it has none, which violates).
    pub value: Option<f64>,
    /// The change, in the limit's unit (percent or absolute); `None` when a side has no value.
    pub change: Option<f64>,
    /// Operator.
    pub op: Op,
    /// Limit.
    pub limit: Limit,
    /// Whether the threshold holds.
    pub ok: bool,
}

/// Why a threshold cannot be checked (bad input: exit status 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The selector, class and phase match nothing in the baseline.
    #[error("`{expr}` matches nothing in the baseline {folder} ({why})")]
    NoMatch { expr: String, folder: String, why: String },
    /// The metric is not in a folder (experiments hold medians of fewer figures).
    #[error("`{expr}`: {folder} has no {metric} (an {kind} folder holds {have})")]
    Metric { expr: String, folder: String, metric: Metric, kind: String, have: String },
    /// A compared folder lacks the baseline's cell or phase.
    #[error("`{expr}`: {folder} has no {what}")]
    Missing { expr: String, folder: String, what: String },
}

/// Checks every threshold on every compared folder against `base`. A
/// threshold that matches nothing, or names a metric or phase a folder
/// does not have, is an error; a missing value (no completions, say) in a
/// compared folder is a violation, in the baseline it is nothing to regress
/// from and the check holds.
pub fn check(thresholds: &[Threshold], base: &Folder, others: &[Folder]) -> Result<Vec<Check>, CheckError> {
    let mut out = Vec::new();
    for t in thresholds {
        for f in [base].into_iter().chain(others) {
            if !f.has(t.metric) {
                let have: Vec<&str> = f.metrics.iter().map(|m| m.name()).collect();
                let kind = format!("{:?}", f.kind).to_lowercase();
                return Err(CheckError::Metric {
                    expr: t.text.clone(),
                    folder: f.dir.clone(),
                    metric: t.metric,
                    kind,
                    have: have.join(", "),
                });
            }
        }
        let cells: Vec<_> = base
            .cells
            .iter()
            .filter(|c| t.selects(&c.sel) && t.class.is_none_or(|k| k == c.class) && c.phase != WARMUP)
            .filter(|c| t.phase.as_deref().is_none_or(|p| p == c.phase))
            .collect();
        if cells.is_empty() {
            return Err(no_match(t, base));
        }
        for other in others {
            for c in &cells {
                let sel = partner(base, &c.sel, other).ok_or_else(|| CheckError::Missing {
                    expr: t.text.clone(),
                    folder: other.dir.clone(),
                    what: format!("cell {}", c.sel),
                })?;
                let new = other.cell(sel, &c.phase, c.class).ok_or_else(|| CheckError::Missing {
                    expr: t.text.clone(),
                    folder: other.dir.clone(),
                    what: format!("phase {} ({})", c.phase, sel),
                })?;
                let b = c.get(t.metric).value;
                let value = new.get(t.metric).value;
                let change = b.zip(value).map(|(b, v)| if t.limit.relative { relative_change(b, v) } else { v - b });
                out.push(Check {
                    expr: t.text.clone(),
                    folder: other.dir.clone(),
                    selection: c.sel.to_string(),
                    class: c.class.long().into(),
                    phase: c.phase.clone(),
                    metric: t.metric,
                    baseline: b,
                    value,
                    change,
                    op: t.op,
                    limit: t.limit,
                    ok: b.is_none() || change.is_some_and(|ch| t.op.holds(ch, t.limit.value)),
                });
            }
        }
    }
    Ok(out)
}

/// The most specific reason a threshold matches nothing.
fn no_match(t: &Threshold, base: &Folder) -> CheckError {
    let sels: Vec<&Selection> = base.selections().into_iter().filter(|s| t.selects(s)).collect();
    let why = if sels.is_empty() {
        let all: Vec<String> = base.selections().iter().map(|s| s.to_string()).collect();
        format!("no cell matches the selector; it has {}", all.join(", "))
    } else {
        let phase = t.phase.as_deref().unwrap_or("*");
        let mut names: Vec<&str> = Vec::new();
        for s in sels {
            for (p, _) in base.phases(s) {
                if p != WARMUP && !names.contains(&p) {
                    names.push(p);
                }
            }
        }
        format!("no phase `{phase}`; it has {}", names.join(", "))
    };
    CheckError::NoMatch { expr: t.text.clone(), folder: base.dir.clone(), why }
}

impl fmt::Display for Check {
    /// One line: what, baseline value, new value, change, limit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let num = |v: f64| crate::report::charts::sig3(v);
        let unit = if self.limit.relative { "%" } else { "" };
        let change = match (self.change, self.baseline) {
            (Some(c), _) if c.is_infinite() => format!("{}inf{unit}", if c > 0.0 { "+" } else { "-" }),
            (Some(c), _) => format!("{}{}{unit}", if c >= 0.0 { "+" } else { "" }, num(c)),
            (None, None) => "none (no baseline value)".into(),
            (None, Some(_)) => "no value".into(),
        };
        write!(
            f,
            "{}.{}.{} [{}] in {}: baseline {}, new {}, change {}, limit {} {}",
            self.class,
            self.phase,
            self.metric,
            self.selection,
            self.folder,
            self.baseline.map_or("–".to_string(), num),
            self.value.map_or("–".to_string(), num),
            change,
            self.op,
            self.limit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::compare::model::{Cell, Info, Kind, Value};

    fn t(s: &str) -> Threshold {
        Threshold::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    /// Expression, class, phase, metric, operator, limit, relative, selector.
    type Case<'a> = (&'a str, Option<Class>, Option<&'a str>, Metric, Op, f64, bool, [Option<&'a str>; 3]);

    #[test]
    fn parses_the_grammar() {
        #[rustfmt::skip]
        let cases: [Case; 10] = [
            ("premium.down2.p95_ms<+10%", Some(Class::P), Some("down2"), Metric::P95Ms, Op::Lt, 10.0, true, [None; 3]),
            ("premium.down1.retention>-0.05", Some(Class::P), Some("down1"), Metric::Retention, Op::Gt, -0.05, false, [None; 3]),
            ("freemium.baseline.goodput_qps>=-5%", Some(Class::F), Some("baseline"), Metric::GoodputQps, Op::Ge, -5.0, true, [None; 3]),
            ("F.rejoin1.p95<=+0", Some(Class::F), Some("rejoin1"), Metric::P95Ms, Op::Le, 0.0, false, [None; 3]),
            (" premium . down2 . p95_ms  <  +10 % ", Some(Class::P), Some("down2"), Metric::P95Ms, Op::Lt, 10.0, true, [None; 3]),
            ("*.*.aborted<=+0", None, None, Metric::AbortedSessions, Op::Le, 0.0, false, [None; 3]),
            ("plb/25:75/cascade/premium.down2.p95_ms<+10%", Some(Class::P), Some("down2"), Metric::P95Ms, Op::Lt, 10.0, true,
                [Some("plb"), Some("25:75"), Some("cascade")]),
            ("*/50:50/*/premium.down1.retention>-0.1", Some(Class::P), Some("down1"), Metric::Retention, Op::Gt, -0.1, false,
                [None, Some("50:50"), None]),
            ("rr/25:75/faults/my.toml/freemium.down1.cv<+.5", Some(Class::F), Some("down1"), Metric::CpuCv, Op::Lt, 0.5, false,
                [Some("rr"), Some("25:75"), Some("faults/my.toml")]),
            ("premium.down2.p95_ms>-12.5%", Some(Class::P), Some("down2"), Metric::P95Ms, Op::Gt, -12.5, true, [None; 3]),
        ];
        for (s, class, phase, metric, op, limit, relative, sel) in cases {
            let th = t(s);
            assert_eq!((th.class, th.phase.as_deref(), th.metric, th.op), (class, phase, metric, op), "{s}");
            assert_eq!(th.limit, Limit { value: limit, relative }, "{s}");
            assert_eq!([th.strategy.as_deref(), th.mix.as_deref(), th.faults.as_deref()], sel, "{s}");
        }
    }

    #[test]
    fn rejects_malformed_expressions() {
        let cases: [(&str, &str); 16] = [
            ("", "no comparison operator"),
            ("premium.down2.p95_ms", "no comparison operator"),
            ("premium.down2.p95_ms=+10%", "no comparison operator"),
            ("premium.down2<+10%", "is not class.phase.metric"),
            ("premium.down2.p95_ms.x<+10%", "is not class.phase.metric"),
            ("gold.down2.p95_ms<+10%", "unknown class `gold`"),
            ("premium.down2.latency<+10%", "unknown metric `latency`"),
            ("premium..p95_ms<+10%", "empty phase name"),
            ("premium.down2.p95_ms<10%", "limit `10%` is not a signed change"),
            ("premium.down2.p95_ms<+", "limit `+` is not a signed change"),
            ("premium.down2.p95_ms<+ten%", "limit `+ten%`"),
            ("premium.down2.p95_ms<+inf", "limit `+inf`"),
            ("premium.down2.p95_ms<+1e3", "limit `+1e3`"),
            ("premium.down2.p95_ms<<+1", "limit `<+1`"),
            ("plb/25:75/premium.down2.p95_ms<+1%", "selector `plb/25:75` is not strategy/mix/faults"),
            ("/premium.down2.p95_ms<+1%", "selector `` is not"),
        ];
        for (s, want) in cases {
            let e = Threshold::parse(s).expect_err(s).to_string();
            assert!(e.contains(want), "{s}: {e}");
            assert!(!e.contains('\n'), "{s}: one line");
        }
    }

    #[test]
    fn operators_and_noise() {
        assert!(Op::Lt.holds(9.99, 10.0) && !Op::Lt.holds(10.0, 10.0));
        assert!(Op::Le.holds((120.0 / 100.0 - 1.0) * 100.0, 20.0));
        assert!(Op::Ge.holds((120.0 / 100.0 - 1.0) * 100.0, 20.0));
        assert!(Op::Gt.holds(-0.04, -0.05) && !Op::Gt.holds(-0.06, -0.05));
        assert!(!Op::Lt.holds(f64::INFINITY, 10.0));
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![Just(Op::Lt), Just(Op::Le), Just(Op::Gt), Just(Op::Ge)]
        }

        fn field() -> impl Strategy<Value = String> {
            prop_oneof![Just("*".to_string()), "[a-z0-9:_-]{1,10}"]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            /// Any text parses or fails with one line, never a panic.
            #[test]
            fn never_panics(s in "\\PC{0,40}") {
                if let Err(e) = Threshold::parse(&s) {
                    prop_assert!(!e.to_string().contains('\n'));
                }
            }

            /// Valid expressions, mutated by one inserted or deleted character, never panic.
            #[test]
            fn mutations_never_panic(pos in 0usize..60, c in any::<char>(), delete in any::<bool>()) {
                let mut s: Vec<char> = "plb/25:75/cascade/premium.down2.p95_ms<=+10.5%".chars().collect();
                let i = pos.min(s.len());
                if delete && i < s.len() { s.remove(i); } else { s.insert(i, c); }
                let s: String = s.into_iter().collect();
                let _ = Threshold::parse(&s);
            }

            /// Printed expressions parse back to what they were built from.
            #[test]
            fn round_trips(sel in proptest::option::of((field(), field(), field())), class in 0usize..3,
                           phase in "[a-z][a-z0-9_]{0,8}", m in 0usize..12, op in op(),
                           value in 0u32..100_000, relative in any::<bool>(), negative in any::<bool>()) {
                let metric = Metric::ALL[m];
                let limit = Limit { value: f64::from(value) / 100.0 * if negative { -1.0 } else { 1.0 }, relative };
                let class_text = ["premium", "freemium", "*"][class];
                let prefix = sel.as_ref().map_or(String::new(), |(a, b, c)| format!("{a}/{b}/{c}/"));
                let sign = if negative { "-" } else { "+" };
                let text = format!("{prefix}{class_text}.{phase}.{metric}{op}{sign}{}{}", f64::from(value) / 100.0, if relative { "%" } else { "" });
                let t = Threshold::parse(&text).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
                prop_assert_eq!(t.class, [Some(Class::P), Some(Class::F), None][class]);
                prop_assert_eq!(t.phase.as_deref(), Some(phase.as_str()));
                prop_assert_eq!((t.metric, t.op), (metric, op));
                prop_assert_eq!(t.limit.relative, limit.relative);
                prop_assert!((t.limit.value - limit.value).abs() < 1e-9);
                let want = sel.map_or((None, None, None), |(a, b, c)| (wildcard(&a), wildcard(&b), wildcard(&c)));
                prop_assert_eq!((t.strategy, t.mix, t.faults), want);
            }
        }
    }

    fn folder(dir: &str, kind: Kind, cells: &[(&str, &str, Class, f64)]) -> Folder {
        let cells = cells
            .iter()
            .map(|&(strategy, phase, class, p95)| {
                let mut values = [Value::default(); 12];
                values[3] = Value::single(Some(p95));
                Cell {
                    sel: Selection { strategy: strategy.into(), mix: "25:75".into(), faults: "cascade".into() },
                    phase: phase.into(),
                    survivors: 5,
                    class,
                    values,
                }
            })
            .collect();
        Folder { dir: dir.into(), kind, info: Info::default(), metrics: vec![Metric::P95Ms], cells }
    }

    #[test]
    fn checks_cells_and_names_what_is_missing() {
        let base =
            folder("base", Kind::Experiment, &[("plb", "down2", Class::P, 100.0), ("rr", "down2", Class::P, 200.0)]);
        let new =
            folder("new", Kind::Experiment, &[("plb", "down2", Class::P, 115.0), ("rr", "down2", Class::P, 190.0)]);
        let checks = check(&[t("premium.down2.p95<+10%")], &base, std::slice::from_ref(&new)).unwrap();
        let got: Vec<(&str, bool)> = checks.iter().map(|c| (c.selection.as_str(), c.ok)).collect();
        assert_eq!(got, [("plb/25:75/cascade", false), ("rr/25:75/cascade", true)]);
        assert_eq!(
            checks[0].to_string(),
            "premium.down2.p95_ms [plb/25:75/cascade] in new: baseline 100, new 115, change +15.0%, limit < +10%"
        );
        let only_rr = check(&[t("rr/*/*/premium.down2.p95<+10%")], &base, std::slice::from_ref(&new)).unwrap();
        assert_eq!(only_rr.len(), 1);
        let abs = check(&[t("p.down2.p95>=-10")], &base, std::slice::from_ref(&new)).unwrap();
        assert_eq!(abs.iter().map(|c| c.change.unwrap()).collect::<Vec<_>>(), [15.0, -10.0]);
        assert!(abs.iter().all(|c| c.ok));
        let errs = [
            (t("premium.down9.p95<+1%"), "no phase `down9`; it has down2"),
            (t("lc/*/*/premium.down2.p95<+1%"), "no cell matches the selector"),
            (t("premium.down2.goodput<+1%"), "new has no goodput_qps"),
        ];
        for (th, want) in errs {
            let mut with_goodput = base.clone();
            with_goodput.metrics.push(Metric::GoodputQps);
            let e = check(&[th], &with_goodput, std::slice::from_ref(&new)).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let partial = folder("part", Kind::Experiment, &[("plb", "down2", Class::P, 1.0)]);
        let e = check(&[t("premium.down2.p95<+1%")], &base, &[partial]).unwrap_err().to_string();
        assert!(e.contains("part has no cell rr/25:75/cascade"), "{e}");
    }

    #[test]
    fn runs_pair_whatever_their_strategy_and_a_missing_value_violates() {
        let base = folder("a", Kind::Run, &[("plb", "down2", Class::P, 100.0)]);
        let mut new = folder("b", Kind::Run, &[("rr", "down2", Class::P, 0.0)]);
        new.cells[0].values[3] = Value::single(None);
        let checks = check(&[t("premium.down2.p95<+10%")], &base, &[new]).unwrap();
        assert_eq!(checks.len(), 1);
        assert!(!checks[0].ok && checks[0].change.is_none());
        assert!(checks[0].to_string().contains("new –, change no value"));
        // Nothing in the baseline: nothing to regress from.
        let mut base = base;
        base.cells[0].values[3] = Value::single(None);
        let new = folder("b", Kind::Run, &[("rr", "down2", Class::P, 5.0)]);
        let checks = check(&[t("premium.down2.p95<+10%")], &base, &[new]).unwrap();
        assert!(checks[0].ok && checks[0].baseline.is_none());
        assert!(
            checks[0].to_string().contains("baseline –, new 5.00, change none (no baseline value)"),
            "{}",
            checks[0]
        );
    }
}
