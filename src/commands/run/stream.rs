//! The file behind `run --stream`: opens it, writes the `run` line and
//! gives the collector a sink that appends each second as one JSON line and
//! flushes it, so a reader following the file sees every second as soon
//! as it is complete. A write that fails is reported once and the run goes
//! on: the stream is a view of the run, the run folder its record.

use super::plan::Plan;
use crate::core::metrics::SecondSink;
use crate::core::stream::{Header, Line};
use crate::error::Error;
use std::io::Write;

/// Creates (or replaces) `--stream`'s file and returns the collector's sink.
pub fn open(plan: &Plan, path: &std::path::Path) -> Result<SecondSink, Error> {
    let file = std::fs::File::create(path)
        .map_err(|e| Error::Input(format!("--stream: cannot create {}: {e}", path.display())))?;
    let mut out = std::io::BufWriter::new(file);
    let s = super::settings(plan);
    let header = Header {
        schema_version: crate::report::version::STREAM,
        strategy: s.strategy,
        mix: s.mix,
        replicas: s.replicas,
        duration_s: s.duration_s,
        cluster: s.cluster,
    };
    let shown = path.display().to_string();
    let mut failed = write(&mut out, &Line::Run(header)).err();
    if let Some(e) = &failed {
        return Err(Error::Input(format!("--stream: cannot write {shown}: {e}")));
    }
    Ok(Box::new(move |second| {
        if failed.is_some() {
            return;
        }
        if let Err(e) = write(&mut out, &Line::Second(second.clone())) {
            eprintln!("plbbench: warning: --stream: writing {shown} failed ({e}); the stream stops here");
            failed = Some(e);
        }
    }))
}

fn write(out: &mut impl Write, line: &Line) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")?;
    out.flush()
}
