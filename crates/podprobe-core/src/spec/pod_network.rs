//! Which network namespace a probe connects from: a pod's, held open for
//! one probe run (`podprobe.network: pod`). The destination policy and the
//! dialer both speak of it; making sockets inside it is [`super::netns`]'s.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// An open network namespace of a pod. Holding it keeps the namespace
/// alive, so it is opened for one probe run and dropped with it: a pod whose
/// sandbox is replaced gets the new namespace on its next run.
#[derive(Debug, Clone)]
pub struct PodNetwork {
    namespace: Arc<File>,
}

/// Two are equal when they are the same open namespace.
impl PartialEq for PodNetwork {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.namespace, &other.namespace)
    }
}

impl Eq for PodNetwork {}

impl PodNetwork {
    /// Opens the network namespace at `path` (`/var/run/netns/cni-...`,
    /// `/proc/<pid>/ns/net`). The node's own namespace is refused: probing
    /// from it as if from the pod would let the pod's loopback rule (see
    /// [`super::destinations`]) reach the node's loopback.
    pub fn open(path: &Path) -> io::Result<PodNetwork> {
        let namespace = File::open(path)?;
        let own = std::fs::metadata("/proc/thread-self/ns/net")?;
        let opened = namespace.metadata()?;
        if (opened.dev(), opened.ino()) == (own.dev(), own.ino()) {
            return Err(io::Error::other(format!(
                "{} is the node's own network namespace, not the pod's",
                path.display()
            )));
        }
        Ok(PodNetwork {
            namespace: Arc::new(namespace),
        })
    }

    /// `file` taken for a namespace without a look: for tests of what
    /// depends only on a probe being in a pod's network.
    #[cfg(test)]
    pub(crate) fn unchecked(file: File) -> PodNetwork {
        PodNetwork {
            namespace: Arc::new(file),
        }
    }

    /// The open namespace file.
    pub fn namespace(&self) -> &Arc<File> {
        &self.namespace
    }
}
