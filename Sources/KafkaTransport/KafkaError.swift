import KafkaMessages

/// An error from the Kafka client: a stable code, librdkafka's text and the call site.
package struct KafkaError: PublishError, Sendable, CustomStringConvertible {
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
    package let message: String
    /// Whether trying the same operation again may succeed. A produce error that is not
    /// retriable (a record larger than `message.max.bytes`, an unknown topic, a denied ACL)
    /// needs an operator or a different record.
    package let isRetriable: Bool
    /// librdkafka's name of the error (`MSG_SIZE_TOO_LARGE`, `_UNKNOWN_TOPIC`…), when it gave one.
    package let cause: String?
    /// The broker can never take the record as it is: it is larger than the producer's or the
    /// broker's size limit.
    package let isRecordTooLarge: Bool
    private let file: String
    private let line: Int

    private init(
        _ code: Code,
        _ message: String,
        isRetriable: Bool,
        cause: String? = nil,
        isRecordTooLarge: Bool = false,
        file: String,
        line: Int
    ) {
        self.code = code
        self.message = message
        self.isRetriable = isRetriable
        self.cause = cause
        self.isRecordTooLarge = isRecordTooLarge
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
    static func produce(_ cause: ProduceErrorCause, file: String = #fileID, line: Int = #line) -> Self {
        .init(.produce, cause.message, isRetriable: cause.isRetriable, cause: cause.name, isRecordTooLarge: cause.isRecordTooLarge, file: file, line: line)
    }
    static func queueFull(file: String = #fileID, line: Int = #line) -> Self {
        .init(.queueFull, "the local produce queue is full", isRetriable: true, file: file, line: line)
    }
    static func delivery(_ cause: ProduceErrorCause, file: String = #fileID, line: Int = #line) -> Self {
        .init(.delivery, cause.message, isRetriable: cause.isRetriable, cause: cause.name, isRecordTooLarge: cause.isRecordTooLarge, file: file, line: line)
    }
    static func commit(_ message: String, file: String = #fileID, line: Int = #line) -> Self {
        .init(.commit, message, isRetriable: true, file: file, line: line)
    }
    static func closed(file: String = #fileID, line: Int = #line) -> Self {
        .init(.closed, "the client is closed", isRetriable: false, file: file, line: line)
    }

    /// librdkafka's local queue had no room; the record was not taken.
    var isQueueFull: Bool { code == .queueFull }

    package var description: String {
        "KafkaError.\(code): \(message) (\(file):\(line))"
    }
}

/// Why librdkafka refused a record or reported it undelivered, and whether sending it again can
/// ever succeed.
struct ProduceErrorCause: Sendable, Hashable {
    /// librdkafka's error name (`MSG_SIZE_TOO_LARGE`, `_MSG_TIMED_OUT`…).
    var name: String
    /// librdkafka's text for the error.
    var message: String
    var isRetriable: Bool
    var isRecordTooLarge: Bool

    /// The errors after which the same record can never be produced as it is; every other
    /// error (time-outs, transport, leader changes, full queues) clears up by itself.
    static let permanentNames: Set<String> = [
        "MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD", "TOPIC_EXCEPTION",
        "POLICY_VIOLATION", "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
        "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_INVALID_ARG",
    ]
    static let tooLargeNames: Set<String> = ["MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"]

    init(name: String, message: String) {
        self.name = name
        self.message = message
        isRetriable = !Self.permanentNames.contains(name)
        isRecordTooLarge = Self.tooLargeNames.contains(name)
    }
}
