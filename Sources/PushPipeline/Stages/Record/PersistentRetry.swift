import APNSCore
import PushCore
import Logging

/// The one retry engine for work Herald may never give up on (publishing a result or a dead
/// letter, a registry or ledger statement): a message is never finished on such a failure, so
/// nothing is lost; the work is tried until it succeeds or the task is cancelled.
///
/// Each attempt says what it came to (``Attempt``). A transient failure (a time-out, a lost
/// connection, a leader change) is retried with `transientBackoff`. A permanent one (an unknown
/// topic, a denied ACL, a missing table, a revoked grant) needs an operator: its cause holds the
/// work in ``blockingCauses`` (Herald is unready while any is held), the owner is told each time
/// a cause comes to hold a piece of work (to count it; the first one, to log it) and when the
/// cause holds nothing any more, and the work is retried with `permanentBackoff`, so a fix resumes it without a restart.
struct PersistentRetry: Sendable {
    /// What one attempt came to.
    enum Attempt<Value> {
        case succeeded(Value)
        /// Clears by itself: wait the transient backoff and try again.
        case transient(any Error)
        /// Needs an operator: `cause` (a short name from a bounded set) holds the work until an
        /// attempt succeeds or fails otherwise; wait the permanent backoff and try again.
        case permanent(cause: String, any Error)
        /// The attempt changed what to try (a dead letter without its value): try again at once.
        case again
        /// Nothing was tried (a bound is full): wait the transient backoff, like a failure.
        case notTried
    }

    /// What the engine tells its owner, each with the metadata the caller of ``run(_:metadata:_:)`` gave.
    struct Reports: Sendable {
        /// `cause` came to hold this work; `first` when it held nothing else.
        var held: @Sendable (_ cause: String, _ error: any Error, _ first: Bool, Logger.Metadata) -> Void
        /// `cause` holds no work any more.
        var released: @Sendable (_ cause: String) -> Void
        /// A transient failure, the `attempt`th failed one of this work.
        var transient: @Sendable (_ error: any Error, _ attempt: Int, Logger.Metadata) -> Void
    }

    let transientBackoff: Backoff
    let permanentBackoff: Backoff
    let reports: Reports
    private let blocked = BlockingCauses()

    init(transientBackoff: Backoff, permanentBackoff: Backoff, reports: Reports) {
        self.transientBackoff = transientBackoff
        self.permanentBackoff = permanentBackoff
        self.reports = reports
    }

    /// The permanent causes holding work right now (empty when everything works).
    var blockingCauses: [String] { blocked.causes }

    /// Runs `attempt` until it succeeds; throws only when cancelled. `metadata` goes with the
    /// reports about this work (the topic of a publish).
    func run<Value>(
        metadata: Logger.Metadata = [:],
        _ attempt: () async -> Attempt<Value>
    ) async throws(CancellationError) -> Value {
        var attempts = RetryAttempts()
        var heldBy: String?
        defer { if let heldBy { release(heldBy) } }
        while true {
            if Task.isCancelled { throw CancellationError() }
            switch await attempt() {
            case .succeeded(let value):
                return value
            case .again:
                continue
            case .notTried:
                try await attempts.waitAfterFailure(transientBackoff)
            case .transient(let error):
                if let held = heldBy { release(held) }
                heldBy = nil
                reports.transient(error, attempts.failures + 1, metadata)
                try await attempts.waitAfterFailure(transientBackoff)
            case .permanent(let cause, let error):
                if heldBy != cause {
                    if let held = heldBy { release(held) }
                    reports.held(cause, error, blocked.hold(cause), metadata)
                    heldBy = cause
                }
                try await attempts.waitAfterFailure(permanentBackoff)
            }
        }
    }

    private func release(_ cause: String) {
        if blocked.release(cause) { reports.released(cause) }
    }
}
