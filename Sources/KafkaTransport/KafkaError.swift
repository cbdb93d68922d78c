/// An error from the Kafka client: a stable code, librdkafka's text and the call site.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    private enum Code: Sendable, Hashable {
        case configuration
        case clientCreation
        case subscription
        case produce
        case queueFull
        case delivery
        case commit
        case closed
    }

    private let code: Code
    /// librdkafka's message, or Herald's; never contains property values.
    public let message: String
    /// Whether trying the same operation again may succeed.
    public let isRetriable: Bool
    private let file: String
    private let line: Int

    private init(_ code: Code, _ message: String, isRetriable: Bool, file: String, line: Int) {
        self.code = code
        self.message = message
        self.isRetriable = isRetriable
        self.file = file
        self.line = line
    }

    static func configuration(_ message: String, file: String = #fileID, line: Int = #line) -> Self {
        .init(.configuration, message, isRetriable: false, file: file, line: line)
    }
    static func clientCreation(_ message: String, file: String = #fileID, line: Int = #line) -> Self {
        .init(.clientCreation, message, isRetriable: false, file: file, line: line)
    }
    static func subscription(_ message: String, file: String = #fileID, line: Int = #line) -> Self {
        .init(.subscription, message, isRetriable: false, file: file, line: line)
    }
    static func produce(_ message: String, isRetriable: Bool, file: String = #fileID, line: Int = #line) -> Self {
        .init(.produce, message, isRetriable: isRetriable, file: file, line: line)
    }
    static func queueFull(file: String = #fileID, line: Int = #line) -> Self {
        .init(.queueFull, "the local produce queue is full", isRetriable: true, file: file, line: line)
    }
    static func delivery(_ message: String, file: String = #fileID, line: Int = #line) -> Self {
        .init(.delivery, message, isRetriable: true, file: file, line: line)
    }
    static func commit(_ message: String, file: String = #fileID, line: Int = #line) -> Self {
        .init(.commit, message, isRetriable: true, file: file, line: line)
    }
    static func closed(file: String = #fileID, line: Int = #line) -> Self {
        .init(.closed, "the client is closed", isRetriable: false, file: file, line: line)
    }

    /// librdkafka's local queue had no room; the record was not taken.
    var isQueueFull: Bool { code == .queueFull }

    public var description: String {
        "KafkaError.\(code): \(message) (\(file):\(line))"
    }
}
