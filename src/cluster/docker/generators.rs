//! Generator containers (`run --generators N --generators-on docker`;
//! [scale](docs/scale.md#generators-in-containers)): each generator child
//! is plbbench itself, run in a container of the registry-free image
//! ([`image::IMAGE`], built first when missing) on the engine `DOCKER_HOST`
//! names. Before a container starts, this executable and the files the
//! run's flags name are uploaded into it at their own paths (no image per
//! binary is built), and its stdin, stdout and stderr are attached through
//! the API: stdout and stdin are handed out as one end of a local socket
//! pair, so the run talks to a container exactly as to a child process;
//! stderr goes to the run's stderr.
//!
//! On an engine on this host the containers share the host's network, so
//! the proxy stays on 127.0.0.1; on a remote engine they reach it at this
//! host's address on the route to the engine ([`proxy_ip`]). Every container
//! has StdinOnce and AutoRemove: when the run ends or dies, the engine
//! closes the child's stdin, the child stops and the engine removes it, so
//! nothing outlives the run even when it is killed; every container also
//! carries plbbench's labels, so `plbbench down --all` finds it.

use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, KillContainerOptions, RemoveContainerOptions,
    UploadToContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::api::{engine, DockerError};
use super::{block, image, runtime, state};

/// Where plbbench runs inside a container.
pub const EXE: &str = "/usr/local/bin/plbbench";

/// What to start: `n` containers, container `i` running
/// `plbbench <args(i)>` in `workdir`, with `files` (absolute paths on this
/// host) uploaded to the same paths.
pub struct Spec<'a> {
    /// How many.
    pub n: u32,
    /// This executable (uploaded as [`EXE`]).
    pub exe: &'a Path,
    /// plbbench's arguments for container `i`.
    pub args: &'a dyn Fn(u32) -> Vec<String>,
    /// Files the arguments name, absolute.
    pub files: Vec<PathBuf>,
    /// The working directory the arguments' relative paths are from.
    pub workdir: PathBuf,
}

/// One started container: its name, and our end of its stdin and stdout.
pub struct Attached {
    /// The container's name.
    pub name: String,
    /// Reads its stdout; writes its stdin (`shutdown(Write)` closes it).
    pub io: UnixStream,
}

/// The run's generator containers; dropping it removes any left.
pub struct Containers {
    rt: tokio::runtime::Runtime,
    docker: Docker,
    names: Vec<String>,
    /// Each container's exit, once the engine reported it.
    exits: Vec<Arc<Mutex<Option<String>>>>,
}

/// Whether the engine runs on this host (a unix socket, or TCP to a
/// loopback address): then containers can share this host's network.
pub fn engine_is_local() -> bool {
    let host = state::client_host(std::env::var("DOCKER_HOST").ok().as_deref());
    host.parse::<IpAddr>().map_or(host == "localhost", |ip| ip.is_loopback())
}

/// The address the proxy listens on for generator containers: 127.0.0.1
/// when the engine is on this host (they share its network), else this
/// host's address on the route to the engine's host.
pub fn proxy_ip() -> Result<IpAddr, DockerError> {
    if engine_is_local() {
        return Ok(IpAddr::from([127, 0, 0, 1]));
    }
    let host = state::client_host(std::env::var("DOCKER_HOST").ok().as_deref());
    let io = |e| DockerError::Io(format!("finding this host's address towards the engine at {host}"), e);
    let socket = std::net::UdpSocket::bind(("0.0.0.0", 0)).map_err(io)?;
    // Connecting a UDP socket sends nothing: it only picks the route.
    socket.connect((host.as_str(), 9)).map_err(io)?;
    Ok(socket.local_addr().map_err(io)?.ip())
}

impl Containers {
    /// Creates, fills, attaches and starts `spec.n` containers (the image
    /// is built first when missing).
    pub fn start(spec: &Spec<'_>) -> Result<(Containers, Vec<Attached>), DockerError> {
        let rt = runtime()?;
        let docker = block(&rt, engine())?;
        block(&rt, image::ensure(&docker.clone().with_timeout(Duration::from_secs(3600)), false))?;
        let archive = bytes::Bytes::from(payload(spec)?);
        let run_id = format!("{:08x}", rand::random::<u32>());
        let mut c = Containers { rt, docker, names: Vec::new(), exits: Vec::new() };
        let mut attached = Vec::new();
        for i in 0..spec.n {
            let name = format!("plbbench-gen-{run_id}-g{i}");
            c.names.push(name.clone());
            let exit = Arc::new(Mutex::new(None));
            c.exits.push(exit.clone());
            let body = create_body(spec, &run_id, (spec.args)(i));
            let io = block(&c.rt, start_one(&c.docker, &name, body, archive.clone(), exit))?;
            attached.push(Attached { name, io });
        }
        Ok((c, attached))
    }

    /// Asks container `i`'s child to stop (SIGTERM), without waiting.
    pub fn stopper(&self, i: usize) -> impl Fn() + Send + Sync + 'static {
        let (docker, name, handle) = (self.docker.clone(), self.names[i].clone(), self.rt.handle().clone());
        move || {
            let (docker, name) = (docker.clone(), name.clone());
            handle.spawn(async move {
                let _ = docker.kill_container(&name, Some(KillContainerOptions { signal: "SIGTERM".into() })).await;
            });
        }
    }

    /// Waits up to `within` for container `i` to exit, then removes it by
    /// force; how it ended.
    pub fn wait(&self, i: usize, within: Duration) -> String {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(e) = self.exits[i].lock().expect("exit lock").clone() {
                return e;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.remove(i);
        format!("removed after {} s", within.as_secs())
    }

    /// Removes container `i` by force (it may be gone already).
    fn remove(&self, i: usize) {
        let opts = RemoveContainerOptions { force: true, ..Default::default() };
        let _ = block(&self.rt, self.docker.remove_container(&self.names[i], Some(opts)));
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for i in 0..self.names.len() {
            if self.exits[i].lock().expect("exit lock").is_none() {
                self.remove(i);
            }
        }
    }
}

/// One tar of this executable and the named files, at their paths.
fn payload(spec: &Spec<'_>) -> Result<Vec<u8>, DockerError> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| DockerError::Io(format!("reading {}", p.display()), e));
    let exe = read(spec.exe)?;
    let mut entries: Vec<(String, u32, Vec<u8>)> = vec![(EXE.trim_start_matches('/').into(), 0o755, exe)];
    for f in &spec.files {
        entries.push((f.to_string_lossy().trim_start_matches('/').into(), 0o644, read(f)?));
    }
    let refs: Vec<(&str, u32, &[u8])> = entries.iter().map(|(n, m, d)| (n.as_str(), *m, d.as_slice())).collect();
    Ok(state::tar(&refs))
}

fn create_body(spec: &Spec<'_>, run_id: &str, args: Vec<String>) -> ContainerCreateBody {
    let network = if engine_is_local() { "host" } else { "bridge" };
    ContainerCreateBody {
        image: Some(image::IMAGE.into()),
        user: Some("postgres".into()),
        cmd: Some(std::iter::once(EXE.to_string()).chain(args).collect()),
        working_dir: Some(spec.workdir.to_string_lossy().into_owned()),
        labels: Some(state::labels("generator", run_id, None)),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        host_config: Some(HostConfig {
            network_mode: Some(network.into()),
            auto_remove: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates `name`, uploads the payload, attaches, starts it and watches
/// for its exit; our end of its stdin and stdout.
async fn start_one(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
    archive: bytes::Bytes,
    exit: Arc<Mutex<Option<String>>>,
) -> Result<UnixStream, DockerError> {
    let api = |what: &str| {
        let what = format!("{what} {name}");
        move |e| DockerError::api(what, e)
    };
    let create = CreateContainerOptions { name: Some(name.into()), ..Default::default() };
    docker.create_container(Some(create), body).await.map_err(api("creating"))?;
    let up = UploadToContainerOptions { path: "/".into(), ..Default::default() };
    docker
        .upload_to_container(name, Some(up), bollard::body_full(archive))
        .await
        .map_err(api("uploading plbbench into"))?;
    let opts = AttachContainerOptions { stdin: true, stdout: true, stderr: true, stream: true, ..Default::default() };
    let streams = docker.attach_container(name, Some(opts)).await.map_err(api("attaching to"))?;
    let (ours, theirs) = UnixStream::pair().map_err(|e| DockerError::Io("making a socket pair".into(), e))?;
    bridge(theirs, streams)?;
    let mut waits = docker.wait_container(name, None);
    docker.start_container(name, None).await.map_err(api("starting"))?;
    tokio::spawn(async move {
        let how = match waits.next().await {
            Some(Ok(w)) => format!("exit status: {}", w.status_code),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => format!("exit status: {code}"),
            Some(Err(e)) => format!("unknown ({e})"),
            None => "unknown".into(),
        };
        *exit.lock().expect("exit lock") = Some(how);
    });
    Ok(ours)
}

/// Copies the container's stdout to `theirs` (stderr to ours) and what
/// arrives on `theirs` to its stdin, until either side ends.
fn bridge(theirs: UnixStream, streams: bollard::container::AttachContainerResults) -> Result<(), DockerError> {
    let io = |e| DockerError::Io("bridging a generator container's streams".into(), e);
    theirs.set_nonblocking(true).map_err(io)?;
    let (mut from_us, mut to_us) = tokio::net::UnixStream::from_std(theirs).map_err(io)?.into_split();
    let bollard::container::AttachContainerResults { mut output, mut input } = streams;
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = output.next().await {
            let passed = match chunk {
                LogOutput::StdOut { message } => to_us.write_all(&message).await,
                LogOutput::StdErr { message } => {
                    use std::io::Write;
                    let _ = std::io::stderr().write_all(&message);
                    Ok(())
                }
                _ => Ok(()),
            };
            if passed.is_err() {
                break;
            }
        }
        let _ = to_us.shutdown().await;
    });
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_us, &mut input).await;
        let _ = input.shutdown().await;
    });
    Ok(())
}
