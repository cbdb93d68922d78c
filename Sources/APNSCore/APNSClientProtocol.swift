/// Sends requests to APNs. The pipeline depends on this protocol only, not on a transport.
public protocol APNSClientProtocol: Sendable {
    /// Sends one request to the environment's host and returns APNs' answer.
    ///
    /// Throws ``APNSTransportError`` when no answer arrived (deadline, connection loss, reset
    /// stream), ``APNSNoCredentialError`` when no credential serves the request's topic.
    func send(_ request: APNSRequest, environment: APNSEnvironment, deadline: ContinuousClock.Instant) async throws
        -> APNSResponse
}
