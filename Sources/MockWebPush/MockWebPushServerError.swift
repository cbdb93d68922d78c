/// Why a ``MockWebPushServer`` call failed.
public struct MockWebPushServerError: Error, Hashable, CustomStringConvertible {
    private enum Code: Hashable {
        case alreadyStarted
        case stopped
        case noPorts
        case notListening
        case noSuchOrigin
        case badApplicationServerKey
    }

    private let code: Code

    /// `run()` was called on a server that had already been started.
    public static let alreadyStarted = MockWebPushServerError(code: .alreadyStarted)
    /// The server has stopped, so it has no listening ports.
    public static let stopped = MockWebPushServerError(code: .stopped)
    /// The configuration lists no port, so there is no origin to serve.
    public static let noPorts = MockWebPushServerError(code: .noPorts)
    /// A subscription was asked for before the server was listening (or after it stopped).
    public static let notListening = MockWebPushServerError(code: .notListening)
    /// A subscription was asked for on an origin index the configuration does not have.
    public static let noSuchOrigin = MockWebPushServerError(code: .noSuchOrigin)
    /// The application server key is not base64url of an uncompressed P-256 point.
    public static let badApplicationServerKey = MockWebPushServerError(code: .badApplicationServerKey)

    public var description: String {
        switch code {
        case .alreadyStarted: "MockWebPushServerError: the server was already started"
        case .stopped: "MockWebPushServerError: the server has stopped"
        case .noPorts: "MockWebPushServerError: the configuration lists no port"
        case .notListening: "MockWebPushServerError: the server is not listening"
        case .noSuchOrigin: "MockWebPushServerError: no origin has that index"
        case .badApplicationServerKey: "MockWebPushServerError: the application server key is not base64url of an uncompressed P-256 point"
        }
    }
}
