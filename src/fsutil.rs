//! The one way plbbench replaces a file or folder atomically: write a
//! temporary sibling named `.<name>.tmp-<pid>` and rename it into place, so
//! a reader never sees half a file and a killed process leaves only a
//! sibling that [`stale_temp_pid`] recognises. Run folders, experiment and
//! comparison files, the archive page and the clusters' state files all go
//! through here. A leaf module with no crate imports.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The temporary sibling of `path` for this process: `.<name>.tmp-<pid>`.
pub fn temp_sibling(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// The process id in a temporary sibling's name, if `name` is one.
pub fn stale_temp_pid(name: &str) -> Option<u32> {
    name.strip_prefix('.').and_then(|n| n.rsplit_once(".tmp-")).and_then(|(_, p)| p.parse().ok())
}

/// Writes `contents` to `path` through [`temp_sibling`] and a rename; the
/// new file has permission bits `mode` (less the umask: 0o666 for an
/// ordinary file, 0o600 for one holding a password). On failure the
/// temporary file is removed and `path` is untouched.
pub fn write_atomic(path: &Path, contents: impl AsRef<[u8]>, mode: u32) -> io::Result<()> {
    let tmp = temp_sibling(path);
    let write = || -> io::Result<()> {
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(contents.as_ref())?;
        fs::rename(&tmp, path)
    };
    write().inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_through_a_recognisable_sibling() {
        let dir = std::env::temp_dir().join(format!("plbbench-fsutil-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.json");
        write_atomic(&path, "one", 0o600).unwrap();
        write_atomic(&path, "two", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["a.json"]);
        let tmp = temp_sibling(&path);
        let name = tmp.file_name().unwrap().to_string_lossy();
        assert_eq!(stale_temp_pid(&name), Some(std::process::id()));
        assert_eq!(stale_temp_pid("a.json"), None);
        assert!(write_atomic(&dir.join("missing").join("b"), "x", 0o666).is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
