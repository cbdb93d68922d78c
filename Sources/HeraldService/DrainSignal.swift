import ServiceLifecycle
import Synchronization

/// Tells the parts that outlive the drain (the HTTP endpoints) that a graceful shutdown began.
///
/// The service group stops its services one at a time in reverse order and waits for each, so
/// a service is told of the shutdown only when its turn comes. The HTTP endpoints must act at
/// the start (answer `/health/ready` with 503, close idle keep-alive connections) but keep
/// answering until the pipeline has drained, so they run early in the group and learn of the
/// drain from this signal, which ``DrainAnnouncer`` (the last service, stopped first) raises.
package final class DrainSignal: Sendable {
    private struct State {
        var begun = false
        var actions: [@Sendable () -> Void] = []
    }

    private let state = Mutex(State())

    package init() {}

    /// Whether the drain began.
    package var hasBegun: Bool { state.withLock { $0.begun } }

    /// Runs `action` when the drain begins (at once if it already has).
    package func onBegin(_ action: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.begun { return true }
            state.actions.append(action)
            return false
        }
        if runNow { action() }
    }

    /// Marks the drain as begun and runs the registered actions, once.
    package func begin() {
        let actions = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.begun else { return [] }
            state.begun = true
            defer { state.actions = [] }
            return state.actions
        }
        for action in actions { action() }
    }
}

/// The service that raises a ``DrainSignal`` when the group's graceful shutdown starts: placed
/// last in the group, it is the first to hear of it, and returns at once.
package struct DrainAnnouncer: Service {
    let signal: DrainSignal

    package init(signal: DrainSignal) {
        self.signal = signal
    }

    package func run() async throws {
        try? await gracefulShutdown()
        signal.begin()
    }
}
