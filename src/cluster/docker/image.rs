//! The registry-free PostgreSQL image of the docker backend ([docker
//! backend](docs/backends.md#docker)): no image registry can be reached, so
//! plbbench builds its own image from Debian packages.
//! `docker/build-rootfs.sh` (compiled into the binary) debootstraps a
//! minimal bookworm with `postgresql-15` into a temporary directory, the
//! directory is tarred, and the tar is imported through the Engine API
//! (`POST /images/create?fromSrc=-`, bollard `create_image`) as [`IMAGE`],
//! labelled with [`LABEL_MANAGED`] and the recipe's hash. The image is
//! reused while its recipe hash matches; `plbbench image build --force`
//! rebuilds it. The Debian mirror comes from this machine's apt sources at
//! build time and is never stored anywhere.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use bollard::query_parameters::CreateImageOptions;
use bollard::Docker;
use futures_util::StreamExt;

use super::api::{DockerError, LABEL_KIND, LABEL_MANAGED};

/// The image's name and tag.
pub const IMAGE: &str = "plbbench/postgres:15";
/// The root filesystem recipe (run as root; argument: target directory).
pub const RECIPE: &str = include_str!("../../../docker/build-rootfs.sh");
/// Label holding a hash of [`RECIPE`]: an image built by another recipe is
/// rebuilt.
pub const LABEL_RECIPE: &str = "org.plbbench.recipe";
/// PostgreSQL's binaries inside the image.
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// Directory owned by `postgres` (mode 0700) that holds the data directory.
pub const PG_HOME: &str = "/var/lib/plbbench";

/// What `build` did.
#[derive(Clone, Debug)]
pub struct Built {
    /// Image id.
    pub id: String,
    /// Seconds the build took (0 when the image was reused).
    pub seconds: f64,
    /// Image size in bytes.
    pub size: i64,
    /// Whether an existing image was reused.
    pub reused: bool,
}

/// FNV-1a of the recipe: stable across builds of plbbench.
pub fn recipe_hash() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in RECIPE.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The image's id and size if it exists and was built by this recipe.
pub async fn current(docker: &Docker) -> Result<Option<(String, i64)>, DockerError> {
    match docker.inspect_image(IMAGE).await {
        Ok(img) => {
            let labels = img.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
            let ours = labels.get(LABEL_RECIPE).map(String::as_str) == Some(recipe_hash().as_str());
            Ok(ours.then(|| (img.id.unwrap_or_default(), img.size.unwrap_or(0))))
        }
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(None),
        Err(e) => Err(DockerError::api("inspecting the image", e)),
    }
}

/// Builds the image unless a current one exists (or `force`).
pub async fn ensure(docker: &Docker, force: bool) -> Result<Built, DockerError> {
    if !force {
        if let Some((id, size)) = current(docker).await? {
            return Ok(Built { id, seconds: 0.0, size, reused: true });
        }
    }
    let t0 = Instant::now();
    if force {
        // The old image goes (unless a container still uses it), so a
        // rebuild leaves no untagged plbbench image behind.
        let _ = docker.remove_image(IMAGE, None::<bollard::query_parameters::RemoveImageOptions>, None).await;
    }
    let work = std::env::temp_dir().join(format!("plbbench-rootfs-{}", std::process::id()));
    let result = build_in(docker, &work).await;
    let _ = std::fs::remove_dir_all(&work);
    result?;
    let (id, size) =
        current(docker).await?.ok_or_else(|| DockerError::Image("the imported image is missing".into()))?;
    Ok(Built { id, seconds: t0.elapsed().as_secs_f64(), size, reused: false })
}

async fn build_in(docker: &Docker, work: &Path) -> Result<(), DockerError> {
    std::fs::create_dir_all(work).map_err(|e| DockerError::Io("creating the build directory".into(), e))?;
    let script = work.join("build-rootfs.sh");
    std::fs::write(&script, RECIPE).map_err(|e| DockerError::Io("writing the recipe".into(), e))?;
    let rootfs = work.join("rootfs");
    eprintln!("plbbench: building {IMAGE} from Debian packages (debootstrap; a few minutes)");
    let s2 = script.clone();
    let r2 = rootfs.clone();
    let out = tokio::task::spawn_blocking(move || Command::new("bash").arg(s2).arg(r2).output())
        .await
        .map_err(|e| DockerError::Image(format!("recipe task: {e}")))?
        .map_err(|e| DockerError::Io("running docker/build-rootfs.sh".into(), e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(8).collect();
        return Err(DockerError::Image(format!(
            "docker/build-rootfs.sh failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    let tar = tar_dir(rootfs).await?;
    import(docker, tar).await
}

/// `tar -c` of a root filesystem with numeric owners (device nodes and
/// hard links included), in memory.
async fn tar_dir(dir: PathBuf) -> Result<Vec<u8>, DockerError> {
    let out = tokio::task::spawn_blocking(move || {
        Command::new("tar").arg("--numeric-owner").arg("-C").arg(&dir).arg("-cf").arg("-").arg(".").output()
    })
    .await
    .map_err(|e| DockerError::Image(format!("tar task: {e}")))?
    .map_err(|e| DockerError::Io("running tar".into(), e))?;
    if !out.status.success() {
        return Err(DockerError::Image(format!("tar failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(out.stdout)
}

/// Imports a root filesystem tar as [`IMAGE`] with plbbench's labels.
async fn import(docker: &Docker, tar: Vec<u8>) -> Result<(), DockerError> {
    let (repo, tag) = IMAGE.split_once(':').expect("name:tag");
    let labels: HashMap<&str, String> =
        [(LABEL_MANAGED, "true".into()), (LABEL_KIND, "image".into()), (LABEL_RECIPE, recipe_hash())].into();
    let mut changes: Vec<String> = labels.iter().map(|(k, v)| format!("LABEL {k}={v}")).collect();
    changes.push(format!("ENV PATH={PG_BIN}:/usr/sbin:/usr/bin:/sbin:/bin"));
    changes.push("USER postgres".into());
    let opts = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repo.into()),
        tag: Some(tag.into()),
        changes,
        ..Default::default()
    };
    let mut stream = docker.create_image(Some(opts), Some(bollard::body_full(tar.into())), None);
    while let Some(item) = stream.next().await {
        item.map_err(|e| DockerError::api("importing the root filesystem", e))?;
    }
    Ok(())
}
