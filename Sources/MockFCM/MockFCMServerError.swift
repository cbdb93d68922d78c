/// Why ``MockFCMServer/run()`` or ``MockFCMServer/listeningPort()`` failed.
public struct MockFCMServerError: Error, Hashable, CustomStringConvertible {
    private enum Code: Hashable {
        case alreadyStarted
        case stopped
    }

    private let code: Code

    /// `run()` was called on a server that had already been started.
    public static let alreadyStarted = MockFCMServerError(code: .alreadyStarted)
    /// The server has stopped, so it has no listening port.
    public static let stopped = MockFCMServerError(code: .stopped)

    public var description: String {
        switch code {
        case .alreadyStarted: "MockFCMServerError: the server was already started"
        case .stopped: "MockFCMServerError: the server has stopped"
        }
    }
}
