import Synchronization

/// Each Firebase project's pause for new attempts, so that trouble one project reports slows
/// every send to it rather than each notification finding out for itself:
///
/// - A QUOTA_EXCEEDED answer naming the project's quota closes the project until the quota's
///   minute rolls (`Retry-After`, at least ``RetryPolicy/quotaExceededWait``); a first attempt
///   meanwhile waits for the end of the closure plus a uniform 0 to 50 % of it, so the pent-up
///   sends reach FCM spread out, not in one instant.
/// - 500/503 (UNAVAILABLE, INTERNAL) engage a ``LoadSheddingGate`` of the project's own, as
///   APNs' overload answers do for APNs.
///
/// A device's quota (a QuotaFailure naming a device) never engages the gate.
final class FCMProjectGates: Sendable {
    private struct Gate {
        let overload: LoadSheddingGate<PipelineClock>
        var closedUntil: ContinuousClock.Instant?
    }

    private let policy: LoadSheddingPolicy
    private let gates = Mutex<[String: Gate]>([:])
    /// Set once any project had trouble: until then a send asks nothing (not even its project).
    private let engaged = Atomic(false)

    /// Whether any project has had trouble since the sender started.
    var isEngaged: Bool { engaged.load(ordering: .relaxed) }

    init(policy: LoadSheddingPolicy) {
        self.policy = policy
    }

    /// `project`'s quota is spent until `until`.
    func closeForQuota(_ project: String, until: ContinuousClock.Instant) {
        gates.withLock { gates in
            var gate = gates[project] ?? Gate(overload: LoadSheddingGate(policy: policy, clock: PipelineClock()))
            gate.closedUntil = max(gate.closedUntil ?? until, until)
            gates[project] = gate
        }
        engaged.store(true, ordering: .relaxed)
    }

    /// FCM answered 500 or 503 for `project`, or its connection failed.
    func recordOverload(_ project: String) {
        let gate = gates.withLock { gates in
            if let gate = gates[project] { return gate.overload }
            let gate = Gate(overload: LoadSheddingGate(policy: policy, clock: PipelineClock()))
            gates[project] = gate
            return gate.overload
        }
        engaged.store(true, ordering: .relaxed)
        gate.recordOverload()
    }

    /// How long a new attempt to `project` waits now (never beyond `deadline`); zero while the
    /// project is healthy.
    func pause(_ project: String, until deadline: ContinuousClock.Instant, using generator: inout some RandomNumberGenerator) -> Duration {
        guard let gate = gates.withLock({ $0[project] }) else { return .zero }
        let now = PipelineClock.now
        if let closedUntil = gate.closedUntil, closedUntil > now {
            let closed = now.duration(to: closedUntil)
            return max(.zero, min(closed + closed * Double.random(in: 0...0.5, using: &generator), now.duration(to: deadline)))
        }
        return gate.overload.pause(until: deadline, using: &generator)
    }
}
