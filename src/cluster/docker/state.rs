//! The docker backend's saved state and small pieces around it: the state
//! file (`<state_dir>/cluster.json`, mode 0600, holding the generated
//! password, so it is never put in a label, an environment variable or a
//! log), object names, and the tiny tar
//! archive that carries the password file into the template container.

use crate::core::model::ReplicaId;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::api::{DockerError, LABEL_CLUSTER, LABEL_KIND, LABEL_MANAGED, LABEL_REPLICA};

/// The generated password: never shown by `Debug`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub(super) struct Secret(pub(super) String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One replica container.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct Rep {
    /// Container name, `plbbench-<id>-r1`...
    pub name: String,
    /// Port on the publish address that maps to its 5432.
    pub port: u16,
    /// NanoCPUs / 1e9.
    pub cpus: f64,
    /// Disconnected from the cluster network.
    #[serde(default)]
    pub partitioned: bool,
}

/// What `cluster.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct State {
    /// Random hex id; part of every object's name and its cluster label.
    pub id: String,
    /// Network name.
    pub network: String,
    /// Data image (template committed after the dataset load), once made.
    pub data_image: Option<String>,
    pub password: Secret,
    /// Host clients connect to (127.0.0.1, or a remote engine's host).
    pub host: String,
    pub replicas: Vec<Rep>,
    pub version: String,
    /// Seconds of each phase of `up`.
    #[serde(default)]
    pub timings: Vec<(String, f64)>,
    /// Kept after plbbench exits (`cluster up`).
    #[serde(default)]
    pub keep: bool,
    /// The plbbench process that owns a cluster it does not keep, as
    /// `(pid, start time)`: once that process is gone (killed with
    /// SIGKILL, say) the cluster is an orphan the next command removes.
    #[serde(default)]
    pub owner: Option<(i32, u64)>,
}

const STATE_FILE: &str = "cluster.json";

/// Reads the state file; `None` when there is none.
pub(super) fn read(dir: &Path) -> Result<Option<State>, DockerError> {
    let path = dir.join(STATE_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DockerError::Io(format!("reading {}", path.display()), e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| DockerError::State(path, e))
}

/// Writes the state file atomically, mode 0600.
pub(super) fn write(dir: &Path, s: &State) -> Result<(), DockerError> {
    fs::create_dir_all(dir).map_err(|e| DockerError::Io(format!("creating {}", dir.display()), e))?;
    let path = dir.join(STATE_FILE);
    let text = serde_json::to_string_pretty(s).map_err(|e| DockerError::State(path.clone(), e))?;
    crate::fsutil::write_atomic(&path, text, 0o600)
        .map_err(|e| DockerError::Io(format!("writing {}", path.display()), e))
}

/// Removes the state file (and the directory when empty).
pub(super) fn remove(dir: &Path) {
    let _ = fs::remove_file(dir.join(STATE_FILE));
    let _ = fs::remove_dir(dir);
}

/// Where docker clusters keep their state: `docker` beside the local
/// backend's directory (`run` clusters use `docker-run`).
pub fn default_state_dir() -> PathBuf {
    crate::cluster::local::default_state_dir().with_file_name("docker")
}

/// Labels of an object of `kind` in cluster `id` (replica `r` if any).
pub(super) fn labels(kind: &str, id: &str, r: Option<usize>) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = [
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_KIND.to_string(), kind.to_string()),
        (LABEL_CLUSTER.to_string(), id.to_string()),
    ]
    .into();
    if let Some(r) = r {
        l.insert(LABEL_REPLICA.into(), ReplicaId(r).to_string());
    }
    l
}

/// A label filter for list calls: every object of cluster `id`, or every
/// plbbench object when `id` is `None`.
pub(super) fn filter(id: Option<&str>) -> HashMap<String, Vec<String>> {
    let label = match id {
        Some(id) => format!("{LABEL_CLUSTER}={id}"),
        None => format!("{LABEL_MANAGED}=true"),
    };
    [("label".to_string(), vec![label])].into()
}

/// The host that clients use to reach published ports: 127.0.0.1 for a
/// local engine, the host part of `tcp://HOST:PORT` for a remote one.
pub(super) fn client_host(docker_host: Option<&str>) -> String {
    let remote = docker_host
        .and_then(|h| {
            h.strip_prefix("tcp://").or_else(|| h.strip_prefix("https://")).or_else(|| h.strip_prefix("http://"))
        })
        .and_then(|rest| rest.rsplit_once(':').map(|(h, _)| h).or(Some(rest)))
        .map(|h| h.trim_matches(['[', ']']).to_string())
        .filter(|h| !h.is_empty());
    remote.unwrap_or_else(|| "127.0.0.1".into())
}

/// One-file-at-a-time ustar archive (what `PUT /containers/{id}/archive`
/// takes): regular files owned by root with the given modes. A path longer
/// than 100 bytes is split at a `/` into ustar's prefix and name.
pub(super) fn tar(files: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, mode, data) in files {
        let mut h = [0u8; 512];
        let field = |h: &mut [u8; 512], at: usize, len: usize, v: &[u8]| {
            h[at..at + v.len().min(len)].copy_from_slice(&v[..v.len().min(len)])
        };
        let (prefix, name) = split_path(path);
        field(&mut h, 0, 100, name.as_bytes());
        field(&mut h, 345, 155, prefix.as_bytes());
        field(&mut h, 100, 8, format!("{mode:07o}\0").as_bytes());
        field(&mut h, 108, 8, b"0000000\0");
        field(&mut h, 116, 8, b"0000000\0");
        field(&mut h, 124, 12, format!("{:011o}\0", data.len()).as_bytes());
        field(&mut h, 136, 12, b"00000000000\0");
        h[156] = b'0';
        field(&mut h, 257, 8, b"ustar\x0000");
        h[148..156].fill(b' ');
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        field(&mut h, 148, 8, format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// ustar's (prefix, name) of `path`: the name whole when it fits in 100
/// bytes, else split at the last `/` that leaves at most 100 bytes after it.
fn split_path(path: &str) -> (&str, &str) {
    if path.len() <= 100 {
        return ("", path);
    }
    let at = path.char_indices().filter(|&(i, c)| c == '/' && path.len() - i - 1 <= 100).map(|(i, _)| i).next();
    at.map_or(("", path), |i| (&path[..i], &path[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_host_follows_docker_host() {
        for (h, want) in [
            (None, "127.0.0.1"),
            (Some("unix:///var/run/docker.sock"), "127.0.0.1"),
            (Some("tcp://big-box:2376"), "big-box"),
            (Some("tcp://10.1.2.3:2375"), "10.1.2.3"),
            (Some("https://[::1]:2376"), "::1"),
        ] {
            assert_eq!(client_host(h), want, "{h:?}");
        }
    }

    #[test]
    fn tar_has_valid_headers() {
        let t = tar(&[("pw", 0o644, b"secret\n")]);
        assert_eq!(t.len(), 512 + 512 + 1024);
        assert_eq!(&t[0..2], b"pw");
        assert_eq!(&t[257..262], b"ustar");
        let stored: u32 = u32::from_str_radix(std::str::from_utf8(&t[148..154]).unwrap(), 8).unwrap();
        let mut h = t[..512].to_vec();
        h[148..156].fill(b' ');
        assert_eq!(stored, h.iter().map(|&b| u32::from(b)).sum::<u32>());
        assert_eq!(&t[512..519], b"secret\n");
    }

    #[test]
    fn a_long_path_goes_into_the_prefix() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(90));
        let t = tar(&[(&long, 0o755, b"x")]);
        assert_eq!(&t[0..90], "f".repeat(90).as_bytes());
        assert_eq!(t[90], 0);
        assert_eq!(&t[345..465], "d".repeat(120).as_bytes());
        assert_eq!(split_path("usr/local/bin/plbbench"), ("", "usr/local/bin/plbbench"));
    }

    #[test]
    fn labels_name_the_cluster() {
        let l = labels("replica", "abc", Some(1));
        assert_eq!(l[LABEL_REPLICA], "r2");
        assert_eq!(l[LABEL_CLUSTER], "abc");
        assert_eq!(filter(None)["label"], vec![format!("{LABEL_MANAGED}=true")]);
    }
}
