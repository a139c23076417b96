//! Liveness pauses (LP1-LP4): a probed pod's
//! `podprobe.io/pause-liveness-until` stops its liveness workers until the
//! time it names, within the node's longest pause.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::effect::ProbeStates;
use super::{Effect, PodTracker, Step};
use crate::prober::events::record::{PodEvent, reasons};
use crate::prober::liveness_pause::{self, PauseChange};
use crate::spec::ProbeKind;
use crate::spec::verdict::EventType;
use crate::status::Mode;
use crate::util::pod::{pod_name, pod_namespace};

impl PodTracker {
    /// Observes a probed pod's pause annotation: a pause that starts stops
    /// the pod's liveness workers, one that ends starts them again (from
    /// their initial result, as new workers), and each change and refusal
    /// is logged and recorded as an Event.
    pub(super) fn observe_pause<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        uid: &str,
        pod: &Arc<Pod>,
    ) {
        let max = self.config.max_liveness_pause;
        let mode = self.config.mode;
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        let Some(probes) = tracked.probes.as_ref() else {
            return;
        };
        let observed = (tracked.pause).observe(liveness_pause::annotation(pod), step.now.wall, max);
        let (name, namespace) = (pod_name(pod), pod_namespace(pod));
        if let Some(refused) = &observed.refused {
            tracing::warn!(
                pod = name,
                namespace,
                %refused,
                "ignoring the pod's liveness pause"
            );
            step.pause_event(
                pod,
                EventType::Warning,
                reasons::LIVENESS_PAUSE_INVALID,
                format!("{refused}; liveness probes run"),
            );
        }
        let Some(change) = observed.change else {
            return;
        };
        match change {
            PauseChange::Started(until) | PauseChange::Moved(until) => {
                let liveness: Vec<String> = (probes.manager.containers_with(ProbeKind::Liveness))
                    .into_iter()
                    .map(str::to_string)
                    .collect();
                let note = pause_note(mode, pod, &liveness, until);
                tracing::info!(pod = name, namespace, %until, "{note}");
                step.pause_event(pod, EventType::Normal, reasons::LIVENESS_PAUSED, note);
                let stopped: Vec<_> = (liveness.into_iter())
                    .map(|container| (container, ProbeKind::Liveness))
                    .collect();
                step.stop_workers(pod, stopped);
                self.next_pause_end = Some(self.next_pause_end.map_or(until, |end| end.min(until)));
            }
            PauseChange::Ended => {
                let note = "Liveness probes resumed".to_string();
                tracing::info!(pod = name, namespace, "{note}");
                step.pause_event(pod, EventType::Normal, reasons::LIVENESS_RESUMED, note);
                // W11: a terminating pod runs no liveness probe anyway.
                if pod.metadata.deletion_timestamp.is_none()
                    && let Some(running) = self.running_probes(uid)
                {
                    step.start_workers(pod, running);
                }
            }
        }
        step.effects.push(Effect::PausedPods(self.paused_pods()));
    }

    /// How many tracked pods have their liveness paused.
    pub(super) fn paused_pods(&self) -> usize {
        self.pods.values().filter(|t| t.pause.paused()).count()
    }

    /// Ends the pauses whose time came, and finds when the next one ends.
    pub(super) fn end_pauses<P: ProbeStates>(&mut self, step: &mut Step<'_, P>, pods: &[Arc<Pod>]) {
        self.next_pause_end = None;
        for pod in pods {
            let paused = (pod.metadata.uid.as_deref())
                .and_then(|uid| self.pods.get(uid))
                .is_some_and(|tracked| tracked.pause.paused());
            if let (true, Some(uid)) = (paused, pod.metadata.uid.as_deref()) {
                self.observe_pause(step, uid, pod);
            }
        }
        self.next_pause_end = (self.pods.values())
            .filter_map(|tracked| tracked.pause.until())
            .min();
    }
}

impl<P> Step<'_, P> {
    /// Records an Event about a pod's pause (LP3), when the pod has a
    /// name and namespace to record it on.
    fn pause_event(&mut self, pod: &Pod, kind: EventType, reason: &'static str, note: String) {
        let event = PodEvent::liveness_pause(pod, kind, reason, note);
        self.effects.extend(event.map(Effect::Record));
    }
}

/// The note of a pause that starts or moves (LP3): until when, which of
/// podprobe's liveness probes it stops and, in gate mode, which of the
/// kubelet's own it cannot stop.
fn pause_note(mode: Mode, pod: &Pod, liveness: &[String], until: Timestamp) -> String {
    let mut note = format!("Liveness probes paused until {until}: ");
    if liveness.is_empty() {
        note.push_str("podprobe runs no liveness probe of this pod");
    } else {
        note.push_str(&format!(
            "podprobe stops no container for them (containers {})",
            liveness.join(", ")
        ));
    }
    let kubelet: Vec<&str> = match (mode, pod.spec.as_ref()) {
        (Mode::Gate, Some(spec)) => (spec.containers.iter())
            .filter(|c| c.liveness_probe.is_some())
            .map(|c| c.name.as_str())
            .collect(),
        _ => Vec::new(),
    };
    if !kubelet.is_empty() {
        note.push_str(&format!(
            "; the kubelet's own livenessProbe of {} is not paused",
            kubelet.join(", ")
        ));
    }
    note
}
