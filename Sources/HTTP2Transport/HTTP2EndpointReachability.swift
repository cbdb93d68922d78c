package import NIOCore

/// What one connection pool knows of one endpoint's reachability.
package struct HTTP2EndpointReachability: Sendable, Hashable {
    package var hasReadyConnection: Bool
    /// When the latest attempt to open a connection failed; nil when none did since one was ready.
    package var lastConnectFailure: NIODeadline?

    /// How long a failed connection attempt counts against readiness when nothing tried since:
    /// the pool reconnects only on demand, so older news says nothing about the endpoint now.
    static let failureMemory = TimeAmount.seconds(60)

    /// Whether Herald can reach the service as far as these pools tell: unreachable only when no
    /// connection to any endpoint is ready and an attempt to open one failed within
    /// ``failureMemory``. One endpoint or one credential failing (the sandbox host, an app's
    /// revoked certificate) leaves Herald ready: its requests fail and are counted, the others go on.
    package static func isReachable(_ states: [HTTP2EndpointReachability], now: NIODeadline) -> Bool {
        states.contains { $0.hasReadyConnection }
            || !states.contains { state in state.lastConnectFailure.map { now - $0 < failureMemory } ?? false }
    }
}
