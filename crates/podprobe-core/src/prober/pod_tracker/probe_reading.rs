//! Which probes a pod has: in gate mode its `podprobe.io/probes`
//! annotation, read off the caller's loop ([`Effect::ReadAnnotation`]) and
//! re-read when edited; in authority mode its spec's probes, which the API
//! server keeps immutable. What cannot run is reported as a Warning Event.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

use super::{Effect, PodTracker, Probes, Reading, Step, Tracked, WorkerCommand};
use crate::prober::events::record::PodEvent;
use crate::prober::liveness_pause::LivenessPause;
use crate::prober::manager::{Nudge, PodProbes};
use crate::prober::markers::PodMarkers;
use crate::prober::pod_sync::SyncSchedule;
use crate::prober::takeover;
use crate::spec::probe_spec::budget::{Budget, OverBudget, PodBudget};
use crate::spec::probe_spec::{SpecError, UnknownProbeField};
use crate::status::{
    AnnotatedProbes, AnnotationError, Mode, Owned, PROBES_ANNOTATION, check_hosts, check_network,
    gate_setup,
};
use crate::util::pod::{pod_name, pod_namespace};

use super::effect::ProbeStates;

/// Gate mode: an annotation edit this soon after the pod's annotation was
/// last read waits for the next resync (#25). A pod that rewrites its
/// annotation in a loop then costs one read, worker restart, Event and
/// patch per resync, not per write; an edit after a quiet spell applies at
/// once, one in a burst within two resync periods.
pub const EDIT_DEBOUNCE: Duration = Duration::from_secs(2);

impl PodTracker {
    /// First sight of a pod, or a change of its annotation (gate mode):
    /// reads its probes and starts workers; see [`Self::update_probes`] for
    /// an annotation edited while its probes run (in authority mode the API
    /// server keeps a pod's probes immutable).
    pub(super) fn track<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        uid: &str,
        pod: &Arc<Pod>,
        unknown: &[UnknownProbeField],
    ) {
        let annotation = match self.config.mode {
            Mode::Gate => probes_annotation(pod).cloned(),
            Mode::Authority => None,
        };
        match self.pods.get(uid) {
            Some(tracked) if tracked.annotation == annotation => return,
            // Left for the next resync, which sees the annotation differ.
            Some(tracked)
                if tracked.probes.is_some()
                    && step.now.at.saturating_duration_since(tracked.read_at) < EDIT_DEBOUNCE =>
            {
                return;
            }
            Some(tracked) if tracked.probes.is_some() => {
                self.update_probes(step, uid, pod, annotation);
                return;
            }
            _ => {}
        }
        if self.config.mode == Mode::Gate
            && !self.pods.contains_key(uid)
            && let Some(finding) = gate_setup::gate_mismatch(pod)
        {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                "{finding}"
            );
            record(step, PodEvent::gate_mismatch(pod, &finding));
        }
        let probes = match (self.config.mode, &annotation) {
            // Probed once read ([`Self::on_reading`]).
            (Mode::Gate, Some(value)) => {
                self.read_annotation(step, uid, pod, value.clone());
                None
            }
            (Mode::Gate, None) => None,
            // podprobe owns the readiness of every pod on the node, with
            // probes or without.
            (Mode::Authority, _) => Some(self.spec_probes(step, pod, unknown)),
        };
        self.pods.insert(
            uid.to_string(),
            Tracked {
                annotation,
                probes: None,
                sync: SyncSchedule::new(step.now.at),
                read_at: step.now.at,
                pause: LivenessPause::default(),
                markers: PodMarkers::default(),
                started: Default::default(),
            },
        );
        if let Some(probes) = probes {
            self.start_probing(step, uid, pod, probes);
        }
    }

    /// Asks for `annotation` of `pod` to be parsed; the result comes back
    /// to [`Self::on_reading`].
    fn read_annotation<P>(&self, step: &mut Step<'_, P>, uid: &str, pod: &Arc<Pod>, value: String) {
        step.effects.push(Effect::ReadAnnotation {
            uid: uid.to_string(),
            pod: pod.clone(),
            annotation: value,
            budget: PodBudget::on_node(self.config.budget, &self.config.node_budget),
        });
    }

    /// An annotation read: ignored if the pod is gone or its annotation has
    /// changed since (a newer reading is under way); otherwise the pod's
    /// first probes start, or its running ones are updated. `current`: the
    /// pod as the watch has it now.
    pub(super) fn on_reading<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        reading: Reading,
        current: Option<Arc<Pod>>,
    ) {
        let Reading {
            uid,
            pod,
            annotation,
            probes,
            budget,
        } = reading;
        let Some(tracked) = self.pods.get(&uid) else {
            return;
        };
        if tracked.annotation.as_deref() != Some(annotation.as_str()) {
            return;
        }
        let running = tracked.probes.is_some();
        let next = self.checked(step, &pod, probes, budget);
        if running {
            self.apply_probes(step, &uid, &pod, next);
            return;
        }
        if let Some(probes) = next {
            self.start_probing(step, &uid, &pod, probes);
            let current = current.unwrap_or(pod);
            if current.metadata.deletion_timestamp.is_some() {
                // W11, as in `on_pod_applied`.
                step.effects
                    .push(Effect::Workers(WorkerCommand::StopLivenessAndStartup(
                        current.clone(),
                    )));
            }
            self.sync_pod(step, &current, Nudge::Yes, None);
        }
    }

    /// Gate mode, an edited annotation of a pod whose probes run (the
    /// kubelet's probes are immutable; podprobe's are not): unchanged probes
    /// keep their workers and results, changed ones get new workers that
    /// start over from their initial result, removed ones stop, added ones
    /// start; a Normal Event says which. An annotation removed altogether
    /// removes every probe. An invalid edit changes nothing but is reported.
    fn update_probes<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        uid: &str,
        pod: &Arc<Pod>,
        annotation: Option<String>,
    ) {
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        tracked.annotation = annotation.clone();
        tracked.read_at = step.now.at;
        match annotation {
            Some(value) => self.read_annotation(step, uid, pod, value),
            None => {
                let none = gate_probes(pod, AnnotatedProbes::default(), PodBudget::default());
                self.apply_probes(step, uid, pod, Some(none));
            }
        }
    }

    /// Replaces a pod's running probes with `next` (see
    /// [`Self::update_probes`]); `None`, an invalid annotation, keeps them.
    fn apply_probes<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        uid: &str,
        pod: &Arc<Pod>,
        next: Option<Probes>,
    ) {
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        let (Some(mut next), Some(current)) = (next, tracked.probes.as_mut()) else {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                "podprobe.io/probes changed to something invalid; the probes it had keep running"
            );
            return;
        };
        let changes = current.manager.changes_to(&next.manager);
        // New workers are about new probes: no instance keeps what a
        // previous probe reported about it.
        next.manager.vouch([]);
        *current = next;
        self.read_markers(step, uid, pod);
        if changes.is_empty() {
            // Same probes written differently: only `owned` may differ.
            return;
        }
        self.report_capped_timeouts(step, uid, pod);
        tracing::info!(
            pod = pod_name(pod),
            namespace = pod_namespace(pod),
            %changes,
            "podprobe.io/probes changed; updating the pod's probes"
        );
        record(step, PodEvent::probes_changed(pod, &changes));
        let mut stopped = changes.changed.clone();
        stopped.extend(changes.removed.iter().cloned());
        step.stop_workers(pod, stopped);
        if let Some(running) = self.running_probes(uid) {
            step.start_workers(pod, running);
        }
    }

    /// Gate mode: an annotation edit [`EDIT_DEBOUNCE`] held back, applied
    /// now.
    pub(super) fn apply_deferred_edit<P: ProbeStates>(
        &mut self,
        step: &mut Step<'_, P>,
        pod: &Arc<Pod>,
    ) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let annotation = probes_annotation(pod);
        let deferred = self.config.mode == Mode::Gate
            && self
                .pods
                .get(uid)
                .is_some_and(|t| t.probes.is_some() && t.annotation.as_ref() != annotation);
        if deferred {
            self.update_probes(step, uid, pod, annotation.cloned());
        }
    }

    /// Each probe whose timeout is cut to the node's cap: a Warning Event
    /// and a log line, once per reading of the pod's probes.
    pub(super) fn report_capped_timeouts<P>(&self, step: &mut Step<'_, P>, uid: &str, pod: &Pod) {
        let Some(probes) = self.pods.get(uid).and_then(|t| t.probes.as_ref()) else {
            return;
        };
        for capped in self.config.timeout_caps.capped(probes.manager.entries()) {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                container = capped.container,
                probe = %capped.kind,
                "{capped}"
            );
            record(step, PodEvent::timeout_capped(pod, &capped));
        }
    }

    /// MK2: the markers of a tracked pod's probes that this node writes;
    /// each refused one is a Warning Event and a log line.
    pub(super) fn read_markers<P>(&mut self, step: &mut Step<'_, P>, uid: &str, pod: &Pod) {
        let Some(tracked) = self.pods.get_mut(uid) else {
            return;
        };
        let Some(probes) = &tracked.probes else {
            return;
        };
        let (markers, refusals) = PodMarkers::of(&probes.manager, &self.config.marker_keys);
        tracked.markers = markers;
        for refusal in refusals {
            tracing::warn!(
                pod = pod_name(pod),
                namespace = pod_namespace(pod),
                container = refusal.container,
                probe = %refusal.kind,
                "{}",
                refusal.message
            );
            record(step, PodEvent::marker_refused(pod, &refusal));
        }
    }

    /// A reading's probes once the node's rules for annotated probes pass
    /// (hosts, `network: pod`); what is wrong is reported, and is `None`.
    fn checked<P>(
        &self,
        step: &mut Step<'_, P>,
        pod: &Pod,
        read: Result<AnnotatedProbes, AnnotationError>,
        budget: PodBudget,
    ) -> Option<Probes> {
        let no_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&no_spec);
        let checked = read.and_then(|annotated| {
            if let Some(rules) = &self.config.annotation_rules {
                check_hosts(&annotated, &rules.destinations)?;
                check_network(spec, &annotated, rules.pod_network)?;
            }
            Ok(annotated)
        });
        match checked {
            Ok(annotated) => Some(gate_probes(pod, annotated, budget)),
            Err(AnnotationError::OverBudget(over)) => {
                report_over_budget(step, pod, &over);
                None
            }
            Err(error) => {
                tracing::warn!(
                    pod = pod_name(pod),
                    namespace = pod_namespace(pod),
                    container = error.container(),
                    %error,
                    "ignoring the pod's probes: invalid annotation"
                );
                if let AnnotationError::TooLong { .. } = error {
                    step.effects
                        .push(Effect::BudgetRefused(Budget::AnnotationBytes));
                }
                record(step, PodEvent::invalid_annotation(pod, &error));
                None
            }
        }
    }

    /// Authority mode: the probes of the pod's spec. A probe that cannot run
    /// as written is reported (log and Warning event) and left out; one
    /// with a field podprobe does not implement (V10) is reported and run
    /// so that every run errors.
    fn spec_probes<P>(
        &self,
        step: &mut Step<'_, P>,
        pod: &Pod,
        unknown: &[UnknownProbeField],
    ) -> Probes {
        let budget = PodBudget::on_node(self.config.budget, &self.config.node_budget);
        let (probes, errors, over_budget) = authority_probes(pod, unknown, budget);
        for over in &over_budget {
            report_over_budget(step, pod, over);
        }
        for error in errors {
            report_spec_error(step, pod, &error);
        }
        probes
    }
}

/// Gate mode: the pod's `podprobe.io/probes` annotation.
fn probes_annotation(pod: &Pod) -> Option<&String> {
    (pod.metadata.annotations.as_ref()).and_then(|a| a.get(PROBES_ANNOTATION))
}

fn record<P>(step: &mut Step<'_, P>, event: Option<PodEvent>) {
    step.effects.extend(event.map(Effect::Record));
}

/// A probe over the pod's or the node's budget: logged, counted and a
/// Warning event.
fn report_over_budget<P>(step: &mut Step<'_, P>, pod: &Pod, over: &OverBudget) {
    tracing::warn!(
        pod = pod_name(pod),
        namespace = pod_namespace(pod),
        container = over.container,
        probe = %over.kind,
        error = %over,
        "refusing the probe: over a budget"
    );
    step.effects.push(Effect::BudgetRefused(over.budget));
    record(step, PodEvent::over_budget(pod, over));
}

fn report_spec_error<P>(step: &mut Step<'_, P>, pod: &Pod, error: &SpecError) {
    tracing::warn!(
        pod = pod_name(pod),
        namespace = pod_namespace(pod),
        container = error.container,
        probe = %error.kind,
        %error,
        "cannot run the probe as written"
    );
    record(step, PodEvent::invalid_spec_probe(pod, error));
}

/// Gate mode's [`Probes`]: the pod's annotated probes.
pub(super) fn gate_probes(pod: &Pod, annotated: AnnotatedProbes, budget: PodBudget) -> Probes {
    let mut probes = PodProbes::new();
    for probe in annotated.iter() {
        probes.insert(probe.container.clone(), probe.kind, probe.spec.clone());
    }
    probes.vouch(takeover::vouched_instances(pod, Mode::Gate));
    Probes {
        owned: Owned::Gate(Arc::new(annotated)),
        manager: probes,
        _budget: budget,
    }
}

/// Authority mode's [`Probes`]: the pod spec's, and the errors of those that
/// cannot run as written or have fields podprobe does not implement.
pub(super) fn authority_probes(
    pod: &Pod,
    unknown: &[UnknownProbeField],
    mut budget: PodBudget,
) -> (Probes, Vec<SpecError>, Vec<OverBudget>) {
    let (mut probes, errors, over_budget) = PodProbes::from_spec(pod, unknown, &mut budget);
    probes.vouch(takeover::vouched_instances(pod, Mode::Authority));
    let probes = Probes {
        owned: Owned::Authority,
        manager: probes,
        _budget: budget,
    };
    (probes, errors, over_budget)
}
