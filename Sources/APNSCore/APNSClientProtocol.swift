import PushCore

/// Sends requests to APNs. The pipeline depends on this protocol only, not on a transport.
public protocol APNSClientProtocol: Sendable {
    /// Sends one request to the environment's host and returns APNs' answer.
    ///
    /// Throws ``TransportError`` when no answer arrived (deadline, connection loss, reset
    /// stream), ``APNSNoCredentialError`` when no credential serves the request's topic.
    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws
        -> APNSResponse

    /// Sends every request at once and calls `answered` with each one's index in `requests` and
    /// what ``send(_:environment:deadline:)`` would have returned or thrown, as each answer
    /// arrives (on whatever thread it arrives); returns once every request was answered.
    ///
    /// The default sends each request from its own child task. A transport can do better: start
    /// the whole batch in one hop to its connections and call back from there, so a batch costs
    /// one task, not one per request.
    func sendAll(
        _ requests: [APNSRequest],
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async
}

extension APNSClientProtocol {
    public func sendAll(
        _ requests: [APNSRequest],
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async {
        await sendEachInATask(requests.count, answered: answered) { index in
            try await send(requests[index], environment: environment, deadline: deadline)
        }
    }
}
