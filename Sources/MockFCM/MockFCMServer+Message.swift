import JSONCore

extension MockFCMServer {
    /// A message that passed the checks: its target and whether it only asks for validation.
    struct MessageCheck {
        var target: String
        /// `token` or `fid`.
        var targetField: String
        var validateOnly: Bool
    }

    /// Why a message was refused, as FCM answers it.
    struct Refusal: Error {
        var answer: MockFCMAnswer
    }

    /// FCM's largest message.
    static let maximumMessageBytes = 4096
    /// FCM's longest `android.ttl`, in seconds.
    static let maximumTTLSeconds = 2_419_200

    /// Checks a send request's body (nil: not JSON) as FCM does: one target, string data values
    /// and no reserved key, `android.priority` and `android.ttl`, and the size of the message (its
    /// target left out, re-serialized compactly; numbers count as written).
    static func check(_ document: JSONValue?) -> Result<MessageCheck, Refusal> {
        func refuse(_ field: String, _ description: String) -> Result<MessageCheck, Refusal> {
            .failure(Refusal(answer: .invalidArgument(field, description)))
        }
        guard let message = document?["message"], case .object(let members) = message else {
            return refuse("message", "Invalid JSON payload received.")
        }
        let targets = ["token", "topic", "condition", "fid"].filter { message[$0] != nil }
        guard targets.count == 1 else {
            return refuse("message", "Exactly one of token, topic, condition or fid must be set.")
        }
        guard let targetField = targets.first, ["token", "fid"].contains(targetField), let target = message[targetField]?.stringValue,
            !target.isEmpty
        else { return refuse("message.\(targets[0])", "The mock delivers to registration tokens and FIDs only.") }
        if let refusal = checkData(message["data"], field: "message.data") { return .failure(refusal) }
        if let android = message["android"] {
            guard case .object = android else { return refuse("message.android", "Invalid value at 'message.android'") }
            if let refusal = checkData(android["data"], field: "message.android.data") { return .failure(refusal) }
            if let priority = android["priority"] {
                guard let text = priority.stringValue, ["normal", "high"].contains(text.lowercased()) else {
                    return refuse("message.android.priority", "Invalid value at 'message.android.priority'")
                }
            }
            if let ttl = android["ttl"] {
                guard let text = ttl.stringValue, isValidDuration(text) else {
                    return refuse("message.android.ttl", "Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration)")
                }
            }
        }
        let size = JSONValue.object(members.filter { $0.name != targetField }).serialized().count
        guard size <= maximumMessageBytes else { return refuse("message", "Message is too big") }
        return .success(MessageCheck(target: target, targetField: targetField, validateOnly: document?["validate_only"] == .bool(true)))
    }

    private static func checkData(_ value: JSONValue?, field: String) -> Refusal? {
        guard let value else { return nil }
        guard let members = value.members else { return Refusal(answer: .invalidArgument(field, "Invalid value at '\(field)'")) }
        // A repeated key counts once, with its last value, as a JSON object parsed into a map.
        var entries: [String: JSONValue] = [:]
        for member in members { entries[member.name] = member.value }
        for (index, (key, entry)) in entries.sorted(by: { $0.key < $1.key }).enumerated() {
            guard entry.stringValue != nil else {
                return Refusal(answer: .invalidArgument("\(field)[\(index)].value", "Invalid value at '\(field)[\(index)].value' (TYPE_STRING)"))
            }
            if key == "from" || key == "message_type" || key.hasPrefix("google.") || key.hasPrefix("gcm.notification.") {
                return Refusal(answer: .invalidArgument(field, "Invalid data payload key: \(key)"))
            }
        }
        return nil
    }

    /// A protobuf JSON duration of FCM's range: `"3.5s"`, up to nine fractional digits.
    static func isValidDuration(_ text: String) -> Bool {
        guard text.hasSuffix("s") else { return false }
        let number = text.dropLast()
        let parts = number.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.allSatisfy(\.isASCII), whole.allSatisfy(\.isNumber),
            let seconds = Int(whole), seconds <= maximumTTLSeconds
        else { return false }
        if parts.count == 2 {
            let fraction = parts[1]
            guard (1...9).contains(fraction.count), fraction.allSatisfy(\.isASCII), fraction.allSatisfy(\.isNumber) else { return false }
            if seconds == maximumTTLSeconds, fraction.contains(where: { $0 != "0" }) { return false }
        }
        return true
    }
}
