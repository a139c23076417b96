//! Writing markers (MK4): a strategic-merge patch of a pod's own metadata
//! (not its status), the keys podprobe's markers own and the pod's UID as a
//! precondition. `patch pods` is granted only where the chart allows marker
//! keys, and its admission policy refuses any other change.

use futures::future::BoxFuture;
use kube::api::{Patch, PatchParams};
use serde_json::Value;

use super::apiclient::{RequestError, bounded};
use super::patcher::FIELD_MANAGER;

/// The one write markers make.
pub trait MarkerApi: Send + Sync + 'static {
    /// Applies `patch` (see `markers::metadata_patch`) to pod
    /// `namespace/name`.
    fn patch_metadata<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: &'a Value,
    ) -> BoxFuture<'a, Result<(), RequestError>>;
}

/// [`MarkerApi`] through the API server.
#[derive(Clone)]
pub struct KubeMarkers(pub kube::Client);

impl MarkerApi for KubeMarkers {
    fn patch_metadata<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        patch: &'a Value,
    ) -> BoxFuture<'a, Result<(), RequestError>> {
        Box::pin(async move {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            let api =
                kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(self.0.clone(), namespace);
            bounded(api.patch_metadata(name, &params, &Patch::Strategic(patch))).await?;
            Ok(())
        })
    }
}
