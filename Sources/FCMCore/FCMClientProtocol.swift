import APNSCore

/// Sends messages to FCM. The pipeline depends on this protocol only, not on a transport.
public protocol FCMClientProtocol: Sendable {
    /// Sends one message with the credential that serves `request.package` and returns FCM's
    /// answer. The client adds the access token and, after a 401 UNAUTHENTICATED, refreshes it
    /// and sends once more (``FCMResponse/accessTokenRefreshed`` is then true).
    ///
    /// Throws ``FCMTransportError`` when no answer arrived (deadline, connection loss, reset
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

/// A request that got no answer from FCM. Every case is safe to retry.
public struct FCMTransportError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case deadlineExceeded
        case connectionFailed
        case tlsHandshakeFailed
        case streamReset
        case shuttingDown
        case accessTokenUnavailable
    }
    private let code: Code
    /// Non-sensitive detail for logs (never a token or a key).
    public let detail: String

    private init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    /// The request's deadline passed before FCM answered.
    public static func deadlineExceeded(_ detail: String = "") -> Self { .init(.deadlineExceeded, detail) }
    /// No connection could be made or it was lost before the answer.
    public static func connectionFailed(_ detail: String = "") -> Self { .init(.connectionFailed, detail) }
    /// The TLS handshake failed (an untrusted or expired certificate, for example).
    public static func tlsHandshakeFailed(_ detail: String = "") -> Self { .init(.tlsHandshakeFailed, detail) }
    /// The stream was reset or refused (for example above a GOAWAY's last stream id).
    public static func streamReset(_ detail: String = "") -> Self { .init(.streamReset, detail) }
    /// The client is shutting down and takes no new requests.
    public static func shuttingDown(_ detail: String = "") -> Self { .init(.shuttingDown, detail) }
    /// No access token could be had for the package's project (the token endpoint refused the
    /// assertion or could not be reached); nothing was sent to FCM.
    public static func accessTokenUnavailable(_ detail: String = "") -> Self { .init(.accessTokenUnavailable, detail) }

    /// True when the deadline ran out.
    public var isDeadlineExceeded: Bool { code == .deadlineExceeded }
    /// True when no connection could be made (a failed TLS handshake included) or it was lost.
    public var isConnectionFailure: Bool { code == .connectionFailed || code == .tlsHandshakeFailed }
    /// True when the stream was reset or refused.
    public var isStreamReset: Bool { code == .streamReset }
    /// True when the client is shutting down.
    public var isShuttingDown: Bool { code == .shuttingDown }
    /// True when no access token could be had.
    public var isAccessTokenUnavailable: Bool { code == .accessTokenUnavailable }

    /// The result's `reason` when the last attempt got no FCM answer: `ConnectionFailed`,
    /// `TLSHandshakeFailed`, `Timeout`, `StreamReset` (as for APNs) or `AccessTokenUnavailable`.
    public var resultReason: String {
        switch code {
        case .connectionFailed, .shuttingDown: "ConnectionFailed"
        case .tlsHandshakeFailed: "TLSHandshakeFailed"
        case .deadlineExceeded: "Timeout"
        case .streamReset: "StreamReset"
        case .accessTokenUnavailable: "AccessTokenUnavailable"
        }
    }

    public var description: String {
        let name =
            switch code {
            case .deadlineExceeded: "deadline exceeded"
            case .connectionFailed: "connection failed"
            case .tlsHandshakeFailed: "TLS handshake failed"
            case .streamReset: "stream reset"
            case .shuttingDown: "shutting down"
            case .accessTokenUnavailable: "no access token"
            }
        return detail.isEmpty ? name : "\(name): \(detail)"
    }
}
