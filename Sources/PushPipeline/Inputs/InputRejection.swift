import JSONCore
import PushCore
import APNSCore
import FCMCore

/// Turns a Kafka value into a JSON object, or says why it is not one.
enum JSONObjectDecoder {
    static func decode(_ value: [UInt8]?) throws(InputRejection) -> JSONValue {
        guard let value, !value.isEmpty else { throw InputRejection(.invalidJSON, "empty value") }
        guard String(validating: value, as: UTF8.self) != nil else {
            throw InputRejection(.invalidJSON, "value is not UTF-8")
        }
        let document: JSONValue
        do {
            document = try JSONParser.parse(value)
        } catch {
            throw InputRejection(.invalidJSON, error.description)
        }
        guard case .object = document else { throw InputRejection(.invalidJSON, "value is not a JSON object") }
        return document
    }
}

/// Typed access to the fields of a JSON object, each failure a schema violation naming the field.
struct FieldReader {
    let object: JSONValue

    /// A string member of `range` UTF-8 bytes. A `headerValue` becomes an HTTP/2 header sent to
    /// APNs, so control characters are rejected here rather than by APNs.
    func string(
        _ name: String,
        bytes range: ClosedRange<Int>,
        required: Bool,
        headerValue: Bool = false
    ) throws(InputRejection) -> String? {
        guard let value = object[name], value != .null else {
            if required { throw InputRejection(.schemaViolation, "\(name) is required") }
            return nil
        }
        guard case .string(let text) = value else { throw InputRejection(.schemaViolation, "\(name) must be a string") }
        try Self.check(text, name: name, bytes: range)
        if headerValue, text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
            throw InputRejection(.schemaViolation, "\(name) contains a control character")
        }
        return text
    }

    /// `production` or `sandbox`, if given.
    func environment(_ name: String = "environment") throws(InputRejection) -> APNSEnvironment? {
        guard let text = try string(name, bytes: 1...32, required: false) else { return nil }
        guard let environment = APNSEnvironment(rawValue: text) else {
            throw InputRejection(.schemaViolation, "\(name) must be production or sandbox")
        }
        return environment
    }

    func integer(_ name: String) throws(InputRejection) -> Int64? {
        guard let value = object[name], value != .null else { return nil }
        guard case .number(let text) = value, let integer = Int64(text) else {
            throw InputRejection(.schemaViolation, "\(name) must be an integer")
        }
        return integer
    }

    static func check(_ text: String, name: String, bytes range: ClosedRange<Int>) throws(InputRejection) {
        let count = text.utf8.count
        guard range.contains(count) else {
            throw InputRejection(.schemaViolation, "\(name) must be \(range.lowerBound)..\(range.upperBound) bytes")
        }
        guard !text.utf8.contains(0) else { throw InputRejection(.schemaViolation, "\(name) contains NUL") }
    }
}
