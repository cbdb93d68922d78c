/// Why ``MockAPNSServer/run()`` or ``MockAPNSServer/listeningPort()`` failed.
public struct MockAPNSServerError: Error, Hashable, CustomStringConvertible {
    private enum Code: Hashable {
        case alreadyStarted
        case stopped
    }

    private let code: Code

    /// `run()` was called on a server that had already been started.
    public static let alreadyStarted = MockAPNSServerError(code: .alreadyStarted)
    /// The server has stopped, so it has no listening port.
    public static let stopped = MockAPNSServerError(code: .stopped)

    public var description: String {
        switch self.code {
        case .alreadyStarted: return "MockAPNSServerError: the server was already started"
        case .stopped: return "MockAPNSServerError: the server has stopped"
        }
    }
}
