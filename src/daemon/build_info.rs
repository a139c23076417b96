//! `podprobe_build_info`: what podprobe was built from and the mode it
//! runs in, published once the daemon knows its mode.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The crate version, and the source revision when the build set
/// `PODPROBE_REVISION` (hack/image.sh and the Dockerfile do).
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
pub(crate) const REVISION: &str = match option_env!("PODPROBE_REVISION") {
    Some(revision) => revision,
    None => "unknown",
};

/// Labels of `podprobe_build_info`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildInfoLabels {
    version: &'static str,
    revision: &'static str,
    mode: &'static str,
}

/// The `podprobe_build_info` family; a cheap handle (reference-counted).
#[derive(Debug, Clone)]
pub struct BuildInfo(Family<BuildInfoLabels, Gauge>);

impl BuildInfo {
    /// Registers `podprobe_build_info` in `registry`, with no series until
    /// [`BuildInfo::set`].
    pub fn register(registry: &mut Registry) -> Self {
        let build_info = Family::<BuildInfoLabels, Gauge>::default();
        registry.register(
            "podprobe_build_info",
            "A metric with a constant '1' value labelled by the version and source revision podprobe was built from and the mode it runs in",
            build_info.clone(),
        );
        BuildInfo(build_info)
    }

    /// Publishes `podprobe_build_info` for `mode` (`gate` or `authority`).
    pub fn set(&self, mode: &'static str) {
        self.0.clear();
        self.0
            .get_or_create(&BuildInfoLabels {
                version: VERSION,
                revision: REVISION,
                mode,
            })
            .set(1);
    }
}
