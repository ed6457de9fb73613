//! The `docker` cluster backend (design.md §6; [docker
//! backend](docs/backends.md#docker)): K PostgreSQL containers through the
//! Docker Engine API (bollard), from the image that [`image`] builds
//! without any registry.
//!
//! [`DockerCluster::up`] creates a private bridge network, runs a template
//! container that `initdb`s (the generated password arrives as a file
//! uploaded into the container, which the template deletes) and loads the
//! dataset once, commits it as a data image, and starts K containers from
//! that image: identical data on every replica. Each container gets
//! `NanoCPUs = C × 10⁹` and a memory limit, and publishes 5432 on
//! 127.0.0.1 at a port plbbench picks. Every container, network and image
//! carries plbbench's labels, so `down` (and `down --all`) removes exactly
//! what plbbench made. Faults go through the API: Down = kill, Rejoin =
//! start, Pause/Resume = pause/unpause, Slow = update NanoCPUs, Partition/
//! Heal = network disconnect/connect. CPU comes from the stats API, one
//! poll per replica every [`CPU_POLL`], accumulated across restarts.
//!
//! The engine is found as the docker CLI finds it: `DOCKER_HOST` (unix or
//! tcp), with TLS when `DOCKER_TLS_VERIFY` is set (certificates from
//! `DOCKER_CERT_PATH`). The API is synchronous; each call runs on the
//! cluster's own tokio runtime in a scoped thread, so it works from plain
//! threads and from blocking tasks of another runtime alike.

use crate::core::model::ReplicaId;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::models::{
    ContainerCreateBody, ContainerUpdateBody, HostConfig, NetworkConnectRequest, NetworkCreateRequest,
    NetworkDisconnectRequest, PortBinding,
};
use bollard::query_parameters::{
    CommitContainerOptions, CreateContainerOptions, KillContainerOptions, ListContainersOptions, ListImagesOptions,
    ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions, RemoveImageOptions, StatsOptions,
    UploadToContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;

use super::local::{procs, DB_NAME, DB_USER};
use super::{dataset, pgconn, Fault};
use image::PG_HOME;
use state::{Rep, Secret, State};

mod api;
pub mod generators;
pub mod image;
mod state;

pub use api::{engine, DockerError, LABEL_CLUSTER, LABEL_KIND, LABEL_MANAGED, LABEL_REPLICA};
pub use state::default_state_dir;

/// How often the stats API is asked for each replica's CPU.
pub const CPU_POLL: Duration = Duration::from_millis(500);
/// How long `up` and Rejoin wait for a server to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// How to provision a docker cluster; `Default` gives the documented values.
#[derive(Clone, Debug, PartialEq)]
pub struct DockerOptions {
    /// Number of replicas K (default 5).
    pub replicas: usize,
    /// NanoCPUs per replica in cores (default 0.3).
    pub cpus: f64,
    /// Memory limit per replica in MiB (default 1024).
    pub memory_mib: u64,
    /// Dataset scale (default 0.05) and seed (default 42).
    pub scale: f64,
    /// Dataset seed.
    pub seed: u64,
    /// Where `cluster.json` lives (default [`default_state_dir`]).
    pub state_dir: PathBuf,
    /// `max_connections` of every server (default 300).
    pub max_connections: u32,
}

impl Default for DockerOptions {
    fn default() -> Self {
        DockerOptions {
            replicas: 5,
            cpus: 0.3,
            memory_mib: 1024,
            scale: 0.05,
            seed: 42,
            state_dir: default_state_dir(),
            max_connections: crate::core::model::MAX_CONNECTIONS,
        }
    }
}

/// Per replica: CPU nanoseconds of earlier incarnations and the last reading.
#[derive(Clone, Copy, Debug, Default)]
struct CpuAcc {
    offset: u64,
    last: u64,
    seen: bool,
}

/// A running docker cluster. `Debug` redacts the password.
#[derive(Debug)]
pub struct DockerCluster {
    state: State,
    state_dir: PathBuf,
    docker: Docker,
    rt: tokio::runtime::Runtime,
    cpu: Arc<Mutex<Vec<CpuAcc>>>,
    stop_poll: Arc<AtomicBool>,
    persistent: bool,
    torn_down: bool,
}

/// Runs `fut` to completion on `rt` from any thread (a scoped thread keeps
/// it out of any runtime the caller may be in).
fn block<F: std::future::Future + Send>(rt: &tokio::runtime::Runtime, fut: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|s| s.spawn(|| rt.block_on(fut)).join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
}

fn runtime() -> Result<tokio::runtime::Runtime, DockerError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| DockerError::Io("starting a tokio runtime".into(), e))
}

/// Whether an engine answers (and why not): what the tests use to skip loudly.
pub fn reachable() -> Result<(), DockerError> {
    let rt = runtime()?;
    block(&rt, engine()).map(|_| ())
}

/// `plbbench image build`: builds the image unless it is current (`force`
/// rebuilds).
pub fn build_image(force: bool) -> Result<image::Built, DockerError> {
    let rt = runtime()?;
    block(&rt, async {
        let docker = engine().await?.with_timeout(Duration::from_secs(3600));
        image::ensure(&docker, force).await
    })
}

/// Removes every plbbench container, network and volume in the engine, and
/// the data images (the base image is kept: it is costly to rebuild).
/// Returns how many objects went.
pub fn remove_all() -> Result<usize, DockerError> {
    let rt = runtime()?;
    block(&rt, async {
        let docker = engine().await?;
        remove_labelled(&docker, None).await
    })
}

async fn remove_labelled(docker: &Docker, id: Option<&str>) -> Result<usize, DockerError> {
    let mut n = 0;
    let list = ListContainersOptions { all: true, filters: Some(state::filter(id)), ..Default::default() };
    for c in docker.list_containers(Some(list)).await.map_err(|e| DockerError::api("listing containers", e))? {
        let Some(cid) = c.id else { continue };
        let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        match docker.remove_container(&cid, Some(opts)).await {
            Ok(()) => n += 1,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => return Err(DockerError::api("removing a container", e)),
        }
    }
    let nets = ListNetworksOptions { filters: Some(state::filter(id)) };
    for net in docker.list_networks(Some(nets)).await.map_err(|e| DockerError::api("listing networks", e))? {
        let Some(nid) = net.id else { continue };
        docker.remove_network(&nid).await.map_err(|e| DockerError::api("removing the network", e))?;
        n += 1;
    }
    let vols = ListVolumesOptions { filters: Some(state::filter(id)) };
    let found = docker.list_volumes(Some(vols)).await.map_err(|e| DockerError::api("listing volumes", e))?;
    for v in found.volumes.unwrap_or_default() {
        docker
            .remove_volume(&v.name, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await
            .map_err(|e| DockerError::api("removing a volume", e))?;
        n += 1;
    }
    let mut f = state::filter(id);
    f.get_mut("label").expect("label filter").push(format!("{LABEL_KIND}=data"));
    let imgs = ListImagesOptions { filters: Some(f), ..Default::default() };
    for img in docker.list_images(Some(imgs)).await.map_err(|e| DockerError::api("listing images", e))? {
        let opts = RemoveImageOptions { force: true, ..Default::default() };
        docker
            .remove_image(&img.id, Some(opts), None)
            .await
            .map_err(|e| DockerError::api("removing a data image", e))?;
        n += 1;
    }
    Ok(n)
}

impl DockerCluster {
    /// Provisions and starts a cluster (see the module doc), building the
    /// image first when it is missing. Not persistent: dropping the result
    /// removes every object it made.
    pub fn up(opts: &DockerOptions) -> Result<DockerCluster, DockerError> {
        if !(1..=64).contains(&opts.replicas) {
            return Err(DockerError::Invalid(format!("replicas must be between 1 and 64, got {}", opts.replicas)));
        }
        if !(opts.cpus.is_finite() && opts.cpus > 0.0) {
            return Err(DockerError::Invalid(format!("cpus must be a positive number of cores, got {}", opts.cpus)));
        }
        if Self::load(&opts.state_dir)?.is_some() {
            return Err(DockerError::AlreadyRunning(opts.state_dir.clone()));
        }
        let rt = runtime()?;
        let docker = block(&rt, engine())?;
        Self::cleanup_stale_with(&rt, &docker, &opts.state_dir)?;
        let t0 = Instant::now();
        let built = block(&rt, image::ensure(&docker.clone().with_timeout(Duration::from_secs(3600)), false))?;
        let id = format!("{:08x}", rand::random::<u32>());
        let password: String = {
            use rand::Rng;
            rand::thread_rng().sample_iter(&rand::distributions::Alphanumeric).take(32).map(char::from).collect()
        };
        let ports = pick_ports(opts.replicas + 1)?;
        let st = State {
            id: id.clone(),
            network: format!("plbbench-{id}"),
            data_image: None,
            password: Secret(password),
            host: state::client_host(std::env::var("DOCKER_HOST").ok().as_deref()),
            replicas: (0..opts.replicas)
                .map(|r| Rep {
                    name: format!("plbbench-{id}-{}", ReplicaId(r)),
                    port: ports[r],
                    cpus: opts.cpus,
                    partitioned: false,
                })
                .collect(),
            version: String::new(),
            timings: vec![("image".into(), if built.reused { 0.0 } else { built.seconds })],
            keep: false,
            owner: procs::own_identity(),
        };
        let mut c = DockerCluster {
            state: st,
            state_dir: opts.state_dir.clone(),
            docker,
            rt,
            cpu: Arc::new(Mutex::new(vec![CpuAcc::default(); opts.replicas])),
            stop_poll: Arc::new(AtomicBool::new(false)),
            persistent: false,
            torn_down: false,
        };
        c.save()?;
        let t1 = Instant::now();
        c.block(c.create_network())?;
        c.build_data_image(opts, ports[opts.replicas])?;
        c.state.timings.push(("template".into(), t1.elapsed().as_secs_f64()));
        let t2 = Instant::now();
        c.block(c.start_replicas(opts))?;
        for r in 0..opts.replicas {
            c.wait_ready(r)?;
        }
        c.state.timings.push(("start".into(), t2.elapsed().as_secs_f64()));
        c.state.timings.push(("total".into(), t0.elapsed().as_secs_f64()));
        c.save()?;
        c.start_poller();
        Ok(c)
    }

    /// The cluster saved in `state_dir` if its containers exist; persistent.
    pub fn load(state_dir: &Path) -> Result<Option<DockerCluster>, DockerError> {
        let Some(st) = state::read(state_dir)? else { return Ok(None) };
        let rt = runtime()?;
        let docker = block(&rt, engine())?;
        let names: Vec<String> = st.replicas.iter().map(|r| r.name.clone()).collect();
        let exists = block(&rt, async {
            let mut any = false;
            for n in &names {
                any |= docker.inspect_container(n, None).await.is_ok();
            }
            any
        });
        if !exists || !st.keep {
            return Ok(None);
        }
        let k = st.replicas.len();
        let mut c = DockerCluster {
            state: st,
            state_dir: state_dir.to_path_buf(),
            docker,
            rt,
            cpu: Arc::new(Mutex::new(vec![CpuAcc::default(); k])),
            stop_poll: Arc::new(AtomicBool::new(false)),
            persistent: true,
            torn_down: false,
        };
        c.start_poller();
        Ok(Some(c))
    }

    /// Removes what a cluster saved in `state_dir` left behind (its labelled
    /// objects and the state file). `Ok(false)` when there was nothing.
    pub fn cleanup_stale(state_dir: &Path) -> Result<bool, DockerError> {
        let rt = runtime()?;
        let docker = block(&rt, engine())?;
        Self::cleanup_stale_with(&rt, &docker, state_dir)
    }

    fn cleanup_stale_with(
        rt: &tokio::runtime::Runtime,
        docker: &Docker,
        state_dir: &Path,
    ) -> Result<bool, DockerError> {
        let Some(st) = state::read(state_dir)? else { return Ok(false) };
        block(rt, remove_labelled(docker, Some(&st.id)))?;
        state::remove(state_dir);
        Ok(true)
    }

    /// Removes every container, the network and the data image of this
    /// cluster, and its state file.
    pub fn down(mut self) -> Result<(), DockerError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), DockerError> {
        self.torn_down = true;
        self.stop_poll.store(true, Ordering::SeqCst);
        let id = self.state.id.clone();
        self.block(remove_labelled(&self.docker, Some(&id)))?;
        state::remove(&self.state_dir);
        Ok(())
    }

    /// Keeps the cluster after plbbench exits (`cluster up`); saved.
    pub fn set_persistent(&mut self, persistent: bool) -> Result<(), DockerError> {
        self.persistent = persistent;
        self.state.keep = persistent;
        self.state.owner = if persistent { None } else { procs::own_identity() };
        self.save()
    }

    /// Removes the cluster saved in `state_dir` when it is an orphan: not
    /// kept, and its recorded owner process gone. `Ok(false)` when there is
    /// none, the owner lives, or no owner is recorded (an older file).
    pub fn reap_orphan(state_dir: &Path) -> Result<bool, DockerError> {
        let Some(st) = state::read(state_dir)? else { return Ok(false) };
        match st.owner {
            Some(o) if !st.keep && procs::owner_gone(o) => {
                let rt = runtime()?;
                let docker = block(&rt, engine())?;
                block(&rt, remove_labelled(&docker, Some(&st.id)))?;
                state::remove(state_dir);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Whether dropping this value leaves the cluster running.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// Number of replicas K.
    pub fn replicas(&self) -> usize {
        self.state.replicas.len()
    }

    /// The cluster id (part of every object's name and label).
    pub fn id(&self) -> &str {
        &self.state.id
    }

    /// Container name of replica `r`. Panics when out of range.
    pub fn container(&self, r: usize) -> &str {
        &self.state.replicas[r].name
    }

    /// Published port of replica `r`. Panics when out of range.
    pub fn port(&self, r: usize) -> u16 {
        self.state.replicas[r].port
    }

    /// Current CPU budget of replica `r` in cores.
    pub fn cpus(&self, r: usize) -> f64 {
        self.state.replicas[r].cpus
    }

    /// Seconds of each phase of `up`: `image` (0 when reused), `template`
    /// (initdb, dataset load, commit), `start`, `total`.
    pub fn up_timings(&self) -> &[(String, f64)] {
        &self.state.timings
    }

    /// libpq DSN of replica `r` (contains the password; never logged).
    pub fn dsn(&self, r: usize) -> String {
        let rep = &self.state.replicas[r];
        format!(
            "host={} port={} user={DB_USER} password={} dbname={DB_NAME}",
            self.state.host, rep.port, self.state.password.0
        )
    }

    /// Connection config of replica `r`. Panics when out of range.
    pub fn config(&self, r: usize) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&self.state.host)
            .port(self.state.replicas[r].port)
            .user(DB_USER)
            .password(&self.state.password.0)
            .dbname(DB_NAME);
        cfg
    }

    /// `SELECT version()` of the template.
    pub fn pg_version(&self) -> String {
        self.state.version.clone()
    }

    /// Cumulative CPU seconds of replica `r` from the stats poller (spans
    /// restarts); `None` before the first reading.
    pub fn cpu_seconds(&self, r: usize) -> Option<f64> {
        let acc = *self.cpu.lock().expect("cpu lock").get(r)?;
        acc.seen.then(|| (acc.offset + acc.last) as f64 / 1e9)
    }

    /// One fresh stats reading of replica `r`'s cumulative CPU nanoseconds
    /// (raw, since the container's last start).
    pub fn cpu_now(&self, r: usize) -> Result<Option<u64>, DockerError> {
        self.check(r)?;
        let name = self.state.replicas[r].name.clone();
        Ok(self.block(read_cpu(&self.docker, &name)))
    }

    /// Applies a fault through the API (see the module doc).
    pub fn apply(&mut self, r: usize, fault: Fault) -> Result<(), DockerError> {
        self.check(r)?;
        let name = self.state.replicas[r].name.clone();
        let net = self.state.network.clone();
        let what = format!("{fault} of {name}");
        let api = |e| DockerError::api(what.clone(), e);
        let d = &self.docker;
        match fault {
            Fault::Down => {
                let opts = KillContainerOptions { signal: "SIGKILL".into() };
                self.block(d.kill_container(&name, Some(opts))).map_err(api)?;
                self.wait_running(r, false)?;
            }
            Fault::Rejoin => {
                self.block(d.start_container(&name, None)).map_err(api)?;
                self.wait_ready(r)?;
            }
            Fault::Pause => self.block(d.pause_container(&name)).map_err(api)?,
            Fault::Resume => self.block(d.unpause_container(&name)).map_err(api)?,
            Fault::Slow(cpus) => {
                let body = ContainerUpdateBody { nano_cpus: Some(nano(cpus)), ..Default::default() };
                self.block(d.update_container(&name, body)).map_err(api)?;
                self.state.replicas[r].cpus = cpus;
            }
            Fault::Partition => {
                let body = NetworkDisconnectRequest { container: name.clone(), force: Some(true) };
                self.block(d.disconnect_network(&net, body)).map_err(api)?;
                self.state.replicas[r].partitioned = true;
            }
            Fault::Heal => {
                let body = NetworkConnectRequest { container: name.clone(), endpoint_config: None };
                self.block(d.connect_network(&net, body)).map_err(api)?;
                self.state.replicas[r].partitioned = false;
            }
        }
        self.save()
    }

    /// NanoCPUs of replica `r` as the engine reports them (inspect).
    pub fn nano_cpus(&self, r: usize) -> Result<i64, DockerError> {
        self.check(r)?;
        let name = &self.state.replicas[r].name;
        let info = self
            .block(self.docker.inspect_container(name, None))
            .map_err(|e| DockerError::api("inspecting a container", e))?;
        Ok(info.host_config.and_then(|h| h.nano_cpus).unwrap_or(0))
    }

    /// Per replica: its container's state (`running`, `paused`, `exited`).
    pub fn states(&self) -> Vec<String> {
        self.state
            .replicas
            .iter()
            .map(|rep| {
                let info = self.block(self.docker.inspect_container(&rep.name, None));
                info.ok().and_then(|i| i.state).and_then(|s| s.status).map_or("missing".into(), |s| s.to_string())
            })
            .collect()
    }

    // ----- internals -----

    fn block<F: std::future::Future + Send>(&self, fut: F) -> F::Output
    where
        F::Output: Send,
    {
        block(&self.rt, fut)
    }

    fn save(&self) -> Result<(), DockerError> {
        state::write(&self.state_dir, &self.state)
    }

    fn check(&self, r: usize) -> Result<(), DockerError> {
        if r < self.state.replicas.len() {
            Ok(())
        } else {
            Err(DockerError::NoSuchReplica { index: r, replicas: self.state.replicas.len() })
        }
    }

    async fn create_network(&self) -> Result<(), DockerError> {
        let req = NetworkCreateRequest {
            name: self.state.network.clone(),
            driver: Some("bridge".into()),
            labels: Some(state::labels("network", &self.state.id, None)),
            ..Default::default()
        };
        self.docker.create_network(req).await.map_err(|e| DockerError::api("creating the network", e))?;
        Ok(())
    }

    /// The container body of a server on the cluster network.
    fn body(&self, s: ServerSpec<'_>) -> ContainerCreateBody {
        let ServerSpec { image, kind, replica: r, port, cpus, memory_mib, cmd } = s;
        let binding = PortBinding { host_ip: Some(publish_ip()), host_port: Some(port.to_string()) };
        ContainerCreateBody {
            image: Some(image.into()),
            user: Some("postgres".into()),
            cmd: Some(cmd),
            exposed_ports: Some(vec!["5432/tcp".into()]),
            labels: Some(state::labels(kind, &self.state.id, r)),
            stop_signal: Some("SIGINT".into()),
            host_config: Some(HostConfig {
                nano_cpus: cpus.map(nano),
                memory: Some((memory_mib * 1024 * 1024) as i64),
                shm_size: Some(256 * 1024 * 1024),
                port_bindings: Some(HashMap::from([("5432/tcp".to_string(), Some(vec![binding]))])),
                network_mode: Some(self.state.network.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Template: initdb with the password file, dataset load, clean stop,
    /// commit as the data image, removal.
    fn build_data_image(&mut self, opts: &DockerOptions, port: u16) -> Result<(), DockerError> {
        let name = format!("plbbench-{}-template", self.state.id);
        let conf = super::local::server_conf(opts.max_connections, "scram-sha-256")
            .replace("listen_addresses = '127.0.0.1'", "listen_addresses = '*'");
        let script = format!(
            "set -e; cd {PG_HOME}; \
             initdb -D data -U {DB_USER} --pwfile=pw -A scram-sha-256 -E UTF8 --locale=C -N >initdb.log 2>&1 || {{ cat initdb.log >&2; exit 1; }}; \
             rm -f pw initdb.log; cat plbbench.conf >> data/postgresql.conf; rm -f plbbench.conf; \
             echo 'host all all all scram-sha-256' >> data/pg_hba.conf; exec postgres -D data"
        );
        let body = self.body(ServerSpec {
            image: image::IMAGE,
            kind: "template",
            replica: None,
            port,
            cpus: None,
            memory_mib: opts.memory_mib.max(1024),
            cmd: vec!["/bin/sh".into(), "-c".into(), script],
        });
        let pw = format!("{}\n", self.state.password.0);
        let archive = state::tar(&[("pw", 0o644, pw.as_bytes()), ("plbbench.conf", 0o644, conf.as_bytes())]);
        let d = self.docker.clone();
        self.block(async {
            let create = CreateContainerOptions { name: Some(name.clone()), ..Default::default() };
            d.create_container(Some(create), body)
                .await
                .map_err(|e| DockerError::api("creating the template container", e))?;
            let up = UploadToContainerOptions { path: PG_HOME.into(), ..Default::default() };
            d.upload_to_container(&name, Some(up), bollard::body_full(archive.into()))
                .await
                .map_err(|e| DockerError::api("uploading the password file", e))?;
            d.start_container(&name, None).await.map_err(|e| DockerError::api("starting the template", e))
        })?;
        let mut cfg = tokio_postgres::Config::new();
        cfg.host(&self.state.host).port(port).user(DB_USER).password(&self.state.password.0).dbname("postgres");
        wait_answer(&cfg, "template")?;
        let sql = |what: String| move |source| DockerError::Sql { what, source };
        pgconn::run_statements(&cfg, &[format!("CREATE DATABASE {DB_NAME}")], Duration::from_secs(60))
            .map_err(sql("creating the database".into()))?;
        cfg.dbname(DB_NAME);
        pgconn::run_statements(&cfg, &dataset::render(opts.scale, opts.seed), super::local::LOAD_TIMEOUT)
            .map_err(sql(format!("loading the dataset (scale {}, seed {})", opts.scale, opts.seed)))?;
        self.state.version = pgconn::query_text(&cfg, "SELECT version()", Duration::from_secs(10))
            .map_err(sql("reading the server version".into()))?
            .unwrap_or_default();
        let image = format!("plbbench/pgdata:{}", self.state.id);
        let labels = state::labels("data", &self.state.id, None);
        self.block(async {
            let stop = KillContainerOptions { signal: "SIGINT".into() };
            d.kill_container(&name, Some(stop)).await.map_err(|e| DockerError::api("stopping the template", e))?;
            let mut waited = d.wait_container(&name, None::<bollard::query_parameters::WaitContainerOptions>);
            while let Some(w) = waited.next().await {
                w.map_err(|e| DockerError::api("waiting for the template to stop", e))?;
            }
            let (repo, tag) = image.split_once(':').expect("name:tag");
            let commit = CommitContainerOptions {
                container: Some(name.clone()),
                repo: Some(repo.into()),
                tag: Some(tag.into()),
                ..Default::default()
            };
            let config = bollard::models::ContainerConfig { labels: Some(labels), ..Default::default() };
            d.commit_container(commit, config).await.map_err(|e| DockerError::api("committing the data image", e))?;
            let rm = RemoveContainerOptions { force: true, ..Default::default() };
            d.remove_container(&name, Some(rm)).await.map_err(|e| DockerError::api("removing the template", e))
        })?;
        self.state.data_image = Some(image);
        self.save()
    }

    async fn start_replicas(&self, opts: &DockerOptions) -> Result<(), DockerError> {
        let image = self.state.data_image.clone().expect("data image built");
        let cmd = vec!["postgres".to_string(), "-D".into(), format!("{PG_HOME}/data")];
        for (r, rep) in self.state.replicas.iter().enumerate() {
            let body = self.body(ServerSpec {
                image: &image,
                kind: "replica",
                replica: Some(r),
                port: rep.port,
                cpus: Some(rep.cpus),
                memory_mib: opts.memory_mib,
                cmd: cmd.clone(),
            });
            let create = CreateContainerOptions { name: Some(rep.name.clone()), ..Default::default() };
            self.docker
                .create_container(Some(create), body)
                .await
                .map_err(|e| DockerError::api(format!("creating {}", rep.name), e))?;
            self.docker
                .start_container(&rep.name, None)
                .await
                .map_err(|e| DockerError::api(format!("starting {}", rep.name), e))?;
        }
        Ok(())
    }

    fn wait_ready(&self, r: usize) -> Result<(), DockerError> {
        wait_answer(&self.config(r), &self.state.replicas[r].name)
    }

    /// Waits until the container runs (or has stopped), up to 10 s.
    fn wait_running(&self, r: usize, running: bool) -> Result<(), DockerError> {
        let name = self.state.replicas[r].name.clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let info = self.block(self.docker.inspect_container(&name, None));
            if info.ok().and_then(|i| i.state).and_then(|s| s.running) == Some(running) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(DockerError::Timeout(format!("{name} did not {} within 10 s", if running { "start" } else { "stop" })))
    }

    /// One task on the cluster's runtime polls every replica's stats every
    /// [`CPU_POLL`] until teardown or drop.
    fn start_poller(&mut self) {
        let names: Vec<String> = self.state.replicas.iter().map(|r| r.name.clone()).collect();
        let (docker, cpu, stop) = (self.docker.clone(), self.cpu.clone(), self.stop_poll.clone());
        self.rt.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let next = tokio::time::Instant::now() + CPU_POLL;
                let reads = futures_util::future::join_all(names.iter().map(|n| read_cpu(&docker, n))).await;
                accumulate(&mut cpu.lock().expect("cpu lock"), &reads);
                tokio::time::sleep_until(next).await;
            }
        });
    }
}

impl Drop for DockerCluster {
    fn drop(&mut self) {
        self.stop_poll.store(true, Ordering::SeqCst);
        if !self.persistent && !self.torn_down {
            if let Err(e) = self.teardown() {
                eprintln!("plbbench: warning: removing the docker cluster failed: {e}");
            }
        }
    }
}

/// Folds one round of raw readings into the per-replica totals: a reading
/// below the last one means the container restarted (its counter began
/// again at 0), so the last one is banked.
fn accumulate(acc: &mut [CpuAcc], reads: &[Option<u64>]) {
    for (a, v) in acc.iter_mut().zip(reads) {
        if let Some(v) = *v {
            if v < a.last {
                a.offset += a.last;
            }
            a.last = v;
            a.seen = true;
        }
    }
}

/// Cumulative CPU nanoseconds of a container since its last start (0 when
/// stopped), from one non-streaming stats call; `None` when unavailable.
async fn read_cpu(docker: &Docker, name: &str) -> Option<u64> {
    let opts = StatsOptions { stream: false, one_shot: true };
    let s = docker.stats(name, Some(opts)).next().await?.ok()?;
    Some(s.cpu_stats.and_then(|c| c.cpu_usage).and_then(|u| u.total_usage).unwrap_or(0))
}

fn nano(cpus: f64) -> i64 {
    (cpus * 1e9).round() as i64
}

/// Address the ports are published on: 127.0.0.1, or
/// `$PLBBENCH_DOCKER_PUBLISH` (e.g. `0.0.0.0` on a remote engine behind a
/// firewall the user controls).
fn publish_ip() -> String {
    std::env::var("PLBBENCH_DOCKER_PUBLISH").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "127.0.0.1".into())
}

/// `n` distinct free ports on 127.0.0.1.
fn pick_ports(n: usize) -> Result<Vec<u16>, DockerError> {
    use std::net::TcpListener;
    let io = |e| DockerError::Io("picking free ports".into(), e);
    let listeners = (0..n).map(|_| TcpListener::bind(("127.0.0.1", 0))).collect::<Result<Vec<_>, _>>().map_err(io)?;
    listeners.iter().map(|l| Ok(l.local_addr().map_err(io)?.port())).collect()
}

/// Waits until `cfg` answers `SELECT 1`, up to [`READY_TIMEOUT`].
fn wait_answer(cfg: &tokio_postgres::Config, what: &str) -> Result<(), DockerError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let err = match pgconn::block_on(pgconn::ping_async(cfg, Duration::from_secs(2))) {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) | Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(DockerError::Sql {
                what: format!("{what} did not answer within {}s", READY_TIMEOUT.as_secs()),
                source: err,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What one container of the cluster runs: the template or a replica.
struct ServerSpec<'a> {
    /// Image to run.
    image: &'a str,
    /// Label value: `template` or `replica`.
    kind: &'a str,
    /// The replica's index (none for the template).
    replica: Option<usize>,
    /// Host port on 127.0.0.1 for the server's 5432.
    port: u16,
    /// CPU limit in cores (none: unlimited).
    cpus: Option<f64>,
    /// Memory limit, MiB.
    memory_mib: u64,
    /// The container's command.
    cmd: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_totals_span_restarts() {
        let mut acc = vec![CpuAcc::default(); 2];
        for round in [[Some(5), None], [Some(9), Some(3)], [Some(0), Some(4)], [None, Some(6)], [Some(2), Some(7)]] {
            accumulate(&mut acc, &round);
        }
        assert_eq!((acc[0].offset + acc[0].last, acc[0].seen), (11, true));
        assert_eq!(acc[1].offset + acc[1].last, 7);
        assert_eq!(nano(0.3), 300_000_000);
    }
}
