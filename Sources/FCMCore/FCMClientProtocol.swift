import PushCore

/// Sends messages to FCM. The pipeline depends on this protocol only, not on a transport.
public protocol FCMClientProtocol: Sendable {
    /// Sends one message with the credential that serves `request.package` and returns FCM's
    /// answer. The client adds the access token and, after a 401 UNAUTHENTICATED, refreshes it
    /// and sends once more (``FCMResponse/accessTokenRefreshed`` is then true).
    ///
    /// Throws ``TransportError`` when no answer arrived (deadline, connection loss, reset
    /// stream, no access token to be had) and ``FCMNoCredentialError`` when no credential
    /// serves the package.
    func send(_ request: FCMRequest, deadline: ContinuousClock.Instant) async throws -> FCMResponse

    /// Sends every request at once and calls `answered` with each one's index in `requests` and
    /// what ``send(_:deadline:)`` would have returned or thrown, as each answer arrives (on
    /// whatever thread it arrives); returns once every request was answered.
    ///
    /// The default sends each request from its own child task; a transport can start the whole
    /// batch in one hop to its connections and call back from there.
    func sendAll(
        _ requests: [FCMRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<FCMResponse, any Error>) -> Void
    ) async

    /// The Firebase project whose quota the sends for `package` count against; nil when the
    /// client cannot tell (the package itself then stands for its project).
    func project(servingPackage package: String) -> String?
}

extension FCMClientProtocol {
    /// None: each package stands for its own project.
    public func project(servingPackage package: String) -> String? { nil }

    public func sendAll(
        _ requests: [FCMRequest],
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<FCMResponse, any Error>) -> Void
    ) async {
        await sendEachInATask(requests.count, answered: answered) { index in
            try await send(requests[index], deadline: deadline)
        }
    }
}

/// A message for a package no credential serves. Nothing was sent; the result is `rejected`
/// with reason ``resultReason``.
public struct FCMNoCredentialError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The request's package.
    public let package: String

    public init(package: String) {
        self.package = package
    }

    /// The result's `reason`: `NoCredentialForPackage`.
    public static let resultReason = "NoCredentialForPackage"

    public var description: String { "no FCM credential serves the package \(package)" }
}
