/// Why an input message cannot be processed (an event, a registration, a channel command, or a
/// platform's part of one): the push.dlq `herald-error` code and a detail for humans.
public struct InputRejection: Error, Sendable, Hashable, CustomStringConvertible {
    /// The stable codes of the contract's push.dlq `herald-error` header.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        case invalidJSON = "invalid_json"
        case schemaViolation = "schema_violation"
        case payloadTooLarge = "payload_too_large"
        case invalidToken = "invalid_token"
    }

    public var code: Code
    /// What is wrong, naming the field; never echoes a whole token.
    public var detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(detail)" }
}
