//! The map's axes (issue 49): which workload parameters a `--vary` names,
//! their values, the cells of the grid they span, and each cell's workload
//! file. Pure: the caller writes the files.

use crate::error::{input, Error};

/// A workload parameter the map can vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// `session.think_ms`: the think time between a session's queries.
    ThinkMs,
    /// The mean queries per session (`queries_min` = mean/2, `queries_max` = 3 x mean/2).
    Queries,
    /// The client population T.
    Clients,
    /// The arrival process: `closed` (no pause between sessions) or open
    /// at an offered fraction of the cluster's CPU budget (`--load`).
    Load,
    /// Routers in the simulated tier (`--routers`): not a workload
    /// parameter but the router's deployment.
    Routers,
    /// The tier followers' snapshot interval (`--refresh-ms`).
    RefreshMs,
}

impl Key {
    /// Every key with its name on the command line.
    pub const ALL: [(Key, &'static str); 6] = [
        (Key::ThinkMs, "think_ms"),
        (Key::Queries, "queries"),
        (Key::Clients, "T"),
        (Key::Load, "load"),
        (Key::Routers, "routers"),
        (Key::RefreshMs, "refresh_ms"),
    ];

    /// Its name on the command line and in files.
    pub fn name(self) -> &'static str {
        Key::ALL.iter().find(|(k, _)| *k == self).map(|(_, n)| *n).expect("every key is named")
    }
}

/// One value of an axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A number (think_ms, queries, T, or an offered load).
    Num(f64),
    /// `load=closed`: a closed population.
    Closed,
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Num(v) => write!(f, "{v}"),
            Value::Closed => f.write_str("closed"),
        }
    }
}

/// An axis: a key and its values, in the order given.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// Which parameter.
    pub key: Key,
    /// Its values.
    pub values: Vec<Value>,
}

/// Parses one `--vary KEY=V1,V2,..`.
pub fn parse_axis(text: &str) -> Result<Axis, Error> {
    let names: Vec<&str> = Key::ALL.iter().map(|(_, n)| *n).collect();
    let (name, list) = text
        .split_once('=')
        .ok_or_else(|| input("--vary", format!("`{text}` is not KEY=V1,V2,.. (keys: {})", names.join(", "))))?;
    let key = Key::ALL
        .iter()
        .find(|(_, n)| *n == name.trim())
        .map(|(k, _)| *k)
        .ok_or_else(|| input("--vary", format!("unknown parameter `{name}` (keys: {})", names.join(", "))))?;
    let field = format!("--vary {name}");
    let values: Vec<Value> = list
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| parse_value(key, v).map_err(|why| input(&field, format!("`{v}` {why}"))))
        .collect::<Result<_, _>>()?;
    if values.is_empty() {
        return Err(input(&field, "names no value"));
    }
    if values.iter().enumerate().any(|(i, v)| values[..i].contains(v)) {
        return Err(input(&field, "lists a value twice"));
    }
    Ok(Axis { key, values })
}

fn parse_value(key: Key, v: &str) -> Result<Value, &'static str> {
    if key == Key::Load && v == "closed" {
        return Ok(Value::Closed);
    }
    let load = "must be `closed` or a positive fraction of the CPU budget";
    let x: f64 = v.parse().map_err(|_| if key == Key::Load { load } else { "is not a number" })?;
    let whole = |max: f64| x >= 1.0 && x.fract() == 0.0 && x <= max;
    let ok = match key {
        Key::ThinkMs => x.is_finite() && x >= 0.0,
        Key::Queries | Key::Clients => whole(1e6),
        Key::Load => x.is_finite() && x > 0.0,
        Key::Routers => whole(f64::from(crate::core::tier::MAX_ROUTERS)),
        Key::RefreshMs => whole(600_000.0),
    };
    match (ok, key) {
        (true, _) => Ok(Value::Num(x)),
        (false, Key::ThinkMs) => Err("must be milliseconds >= 0"),
        (false, Key::Load) => Err(load),
        (false, Key::Routers) => Err("must be a whole number from 1 to 64"),
        (false, Key::RefreshMs) => Err("must be whole milliseconds from 1 to 600,000"),
        (false, _) => Err("must be a whole number from 1 to 1,000,000"),
    }
}

/// Checks the axes together: at least one, no key twice.
pub fn check_axes(axes: &[Axis]) -> Result<(), Error> {
    if axes.is_empty() {
        return Err(input("--vary", "name at least one parameter"));
    }
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].iter().any(|b| b.key == a.key) {
            return Err(input("--vary", format!("`{}` is varied twice", a.key.name())));
        }
    }
    Ok(())
}

/// A cell of the grid: one value per axis, in the axes' order.
pub type Cell = Vec<(Key, Value)>;

/// Every cell, the first axis varying fastest.
pub fn cells(axes: &[Axis]) -> Vec<Cell> {
    let total: usize = axes.iter().map(|a| a.values.len()).product();
    (0..total)
        .map(|mut i| {
            axes.iter()
                .map(|a| {
                    let v = a.values[i % a.values.len()];
                    i /= a.values.len();
                    (a.key, v)
                })
                .collect()
        })
        .collect()
}

/// A cell's folder name: `think_ms-250_queries-40_load-closed`.
pub fn cell_name(cell: &Cell) -> String {
    cell.iter().map(|(k, v)| format!("{}-{v}", k.name())).collect::<Vec<_>>().join("_")
}

/// The value of `key` in `cell`, if it is an axis.
pub fn get(cell: &Cell, key: Key) -> Option<Value> {
    cell.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The base workload's TOML with the cell's session values: think time,
/// session length, and `between_ms` (0 for `load=closed`, a placeholder
/// the run's `--load` replaces for an open cell). A cell with a load drops
/// the base's operating point: the axis sets the load.
pub fn cell_workload(base: &str, cell: &Cell) -> Result<String, Error> {
    let mut doc: toml::Table = toml::from_str(base).map_err(|e| input("--workload", e))?;
    if get(cell, Key::Load).is_some() {
        doc.remove("operating_point");
    }
    let session = doc
        .entry("session")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or_else(|| input("--workload", "`session` is not a table"))?;
    for (key, value) in cell {
        match (key, value) {
            (Key::ThinkMs, Value::Num(ms)) => {
                session.insert("think_ms".into(), toml::Value::Float(*ms));
            }
            (Key::Queries, Value::Num(n)) => {
                let (lo, hi) = ((n / 2.0).round().max(1.0), (n * 1.5).round().max(1.0));
                session.insert("queries_min".into(), toml::Value::Integer(lo as i64));
                session.insert("queries_max".into(), toml::Value::Integer(hi as i64));
            }
            (Key::Load, Value::Closed) => {
                session.insert("between_ms".into(), toml::Value::Float(0.0));
            }
            (Key::Load, Value::Num(_)) => {
                session.insert("between_ms".into(), toml::Value::Float(1000.0));
            }
            _ => {}
        }
    }
    let name = doc.get("name").and_then(|n| n.as_str()).unwrap_or("workload").to_string();
    doc.insert("name".into(), toml::Value::String(format!("{name} @ {}", cell_name(cell))));
    toml::to_string(&doc).map_err(|e| input("--workload", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_parse_and_bad_ones_are_refused_naming_the_field() {
        let a = parse_axis("think_ms=250,500").unwrap();
        assert_eq!((a.key, a.values.len()), (Key::ThinkMs, 2));
        assert_eq!(parse_axis("load=closed,0.5").unwrap().values, [Value::Closed, Value::Num(0.5)]);
        let err = |t: &str| parse_axis(t).unwrap_err().to_string();
        assert!(err("colour=red").contains("--vary: unknown parameter `colour`"), "{}", err("colour=red"));
        assert!(err("think_ms=").contains("--vary think_ms: names no value"));
        assert!(err("queries=2.5").contains("--vary queries: `2.5` must be a whole number"));
        assert!(err("T=10,10").contains("lists a value twice"));
        assert!(err("routers=0").contains("--vary routers: `0` must be a whole number from 1 to 64"));
        assert!(err("refresh_ms=0.5").contains("--vary refresh_ms: `0.5` must be whole milliseconds"));
        assert_eq!(parse_axis("routers=1,2,4,8").unwrap().values.len(), 4);
        assert!(err("think_ms").contains("is not KEY=V1,V2"));
        let twice = [parse_axis("T=1").unwrap(), parse_axis("T=2").unwrap()];
        assert!(check_axes(&twice).unwrap_err().to_string().contains("`T` is varied twice"));
    }

    #[test]
    fn cells_span_the_grid_with_the_first_axis_fastest() {
        let axes = [parse_axis("think_ms=1,2,3").unwrap(), parse_axis("queries=10,20").unwrap()];
        let c = cells(&axes);
        assert_eq!(c.len(), 6);
        assert_eq!(cell_name(&c[0]), "think_ms-1_queries-10");
        assert_eq!(cell_name(&c[1]), "think_ms-2_queries-10");
        assert_eq!(cell_name(&c[5]), "think_ms-3_queries-20");
    }

    #[test]
    fn a_cell_workload_sets_the_session_and_still_loads() {
        let base = crate::commands::run::plan::BUILT_IN_WORKLOADS[0].1;
        let cell =
            vec![(Key::ThinkMs, Value::Num(100.0)), (Key::Queries, Value::Num(10.0)), (Key::Load, Value::Closed)];
        let text = cell_workload(base, &cell).unwrap();
        let w = crate::core::workload::Workload::parse(&text).unwrap();
        assert_eq!((w.session.think_ms, w.session.queries_min, w.session.queries_max), (100.0, 5, 15));
        assert_eq!(w.session.between_ms, 0.0);
        assert!(w.operating_point.is_none(), "the cell's load replaces the base's point");
        assert!(w.name.ends_with("@ think_ms-100_queries-10_load-closed"), "{}", w.name);
    }
}
