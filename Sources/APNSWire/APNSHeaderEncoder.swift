import APNSCore
import NIOCore
import HTTP2Transport

/// Encodes the HEADERS block of the APNs requests of one connection (HPACK, RFC 7541), keeping
/// its own copy of the dynamic table the peer's decoder builds.
///
/// Hand-written because of a measurement: in `herald-bench sender` (BENCHMARKS.md, "What each
/// change bought") NIOHPACK's general encoder, with the `HPACKHeaders` list built for it, was a
/// large share of the sender's samples, most of it hashing every name case-insensitively to
/// search the static and dynamic tables. An APNs request has a fixed set of fields whose names
/// and static indices are known here, so this encoder searches only for the values that repeat.
///
/// HPACK choices follow Apple's provider API guide; no value is Huffman coded:
/// - `:path` (it carries the device token) and `authorization` (the JWT) are literals without
///   indexing, so neither ever enters the dynamic table.
/// - `apns-id`, `apns-expiration` and `apns-collapse-id` enter the table once with their first
///   value; later values are literals without indexing that refer to that entry's name, so the
///   ever-changing values do not churn the table.
/// - `:method`, `:scheme`, `:authority`, `apns-topic`, `apns-push-type` and `apns-priority`
///   repeat: a value already in the table is sent as its index, a new one is added to the table.
///
/// A broadcast names its channel in `apns-channel-id` and its id in `apns-request-id` (the path
/// carries the bundle ID: no `apns-topic`); a channel management request sends only
/// `apns-request-id` and, to read or delete, `apns-channel-id`. Both are literals without indexing.
struct APNSHeaderEncoder: Sendable {
    /// The table size this encoder uses at most (the HTTP/2 default of SETTINGS_HEADER_TABLE_SIZE).
    static let maxTableSize = HPACKTable.defaultSize

    /// The fields that may enter the dynamic table.
    enum Field: Int, CaseIterable, Sendable {
        case authority, method, topic, pushType, priority, apnsID, expiration, collapseID

        var name: String {
            switch self {
            case .authority: ":authority"
            case .method: ":method"
            case .topic: "apns-topic"
            case .pushType: "apns-push-type"
            case .priority: "apns-priority"
            case .apnsID: "apns-id"
            case .expiration: "apns-expiration"
            case .collapseID: "apns-collapse-id"
            }
        }

        /// The name's index in the static table (RFC 7541 appendix A), if it has one.
        var staticNameIndex: Int? {
            switch self {
            case .authority: 1
            case .method: 2
            default: nil
            }
        }
    }

    private struct Key: Hashable {
        var field: Field
        var value: String
    }

    /// The entries added to the peer's dynamic table and not evicted yet, oldest first. The
    /// entry added as the n-th (counting from 0) has HPACK index 62 + (`added` - 1 - n).
    private var entries = CircularBuffer<(key: Key, size: Int)>()
    /// How many entries were ever added; `added - entries.count` of them are evicted.
    private var added = 0
    /// The number of each entry in ``entries`` by field and value.
    private var numbers: [Key: Int] = [:]
    /// The number of the newest entry in ``entries`` with each field's name.
    private var newestWithName = [Int?](repeating: nil, count: Field.allCases.count)
    /// Each field's value last sent as an index, and that entry's number: most requests repeat
    /// the one before, and comparing two strings is cheaper than hashing one for ``numbers``.
    private var lastIndexed = [(value: String, number: Int)?](repeating: nil, count: Field.allCases.count)
    /// The entries' size as RFC 7541 section 4.1 counts it.
    private(set) var tableSize = 0
    /// The most the table may hold, signalled to the peer.
    private(set) var tableCapacity = Self.maxTableSize
    /// A capacity change not signalled yet: the smallest capacity since the last block and the
    /// current one (RFC 7541 section 4.2).
    private var unsignalledCapacity: (smallest: Int, current: Int)?

    /// Follows the peer's SETTINGS_HEADER_TABLE_SIZE: the table never grows beyond it nor beyond
    /// ``maxTableSize``. The next block starts with the change.
    mutating func peerAllowsTableSize(_ size: Int) {
        let capacity = min(size, Self.maxTableSize)
        guard capacity != tableCapacity else { return }
        tableCapacity = capacity
        evict(toFit: 0)
        unsignalledCapacity = (min(unsignalledCapacity?.smallest ?? capacity, capacity), capacity)
    }

    /// Writes the header block of `request` to `block`.
    mutating func encode(_ request: APNSRequest, authority: String, authorization: String?, to block: inout ByteBuffer) {
        if let change = unsignalledCapacity {
            if change.smallest < change.current {
                block.writeHPACKInteger(change.smallest, prefixBits: 5, flags: 0b0010_0000)
            }
            block.writeHPACKInteger(change.current, prefixBits: 5, flags: 0b0010_0000)
            unsignalledCapacity = nil
        }
        switch request.method {
        case "POST": block.writeHPACKInteger(3, prefixBits: 7, flags: 0b1000_0000)  // :method POST
        case "GET": block.writeHPACKInteger(2, prefixBits: 7, flags: 0b1000_0000)  // :method GET
        case let method: writeRepeating(.method, method, to: &block)
        }
        block.writeHPACKInteger(7, prefixBits: 7, flags: 0b1000_0000)  // :scheme https
        // :path (static name 4), without indexing.
        block.writeHPACKInteger(4, prefixBits: 4, flags: 0)
        if case .device(let token) = request.destination {
            // The path without building it: the prefix, then the token.
            block.writeHPACKInteger(APNSRequest.devicePathPrefix.utf8.count + token.utf8.count, prefixBits: 7, flags: 0)
            block.writeString(APNSRequest.devicePathPrefix)
            block.writeString(token)
        } else {
            block.writeHPACKString(request.path)
        }
        writeRepeating(.authority, authority, to: &block)
        if let authorization {
            // authorization (static name 23), without indexing.
            block.writeHPACKInteger(23, prefixBits: 4, flags: 0)
            block.writeHPACKString(authorization)
        }
        switch request.destination {
        case .device:
            writeRepeating(.topic, request.topic, to: &block)
        case .channel(let channelID):
            Self.writeUnindexed(name: "apns-channel-id", channelID, to: &block)
            Self.writeUnindexed(name: "apns-request-id", request.apnsID, to: &block)
        case .channelManagement(let operation):
            Self.writeUnindexed(name: "apns-request-id", request.apnsID, to: &block)
            if let channelID = operation.channelID {
                Self.writeUnindexed(name: "apns-channel-id", channelID, to: &block)
            }
            return
        }
        writeRepeating(.pushType, request.pushType.rawValue, to: &block)
        writeRepeating(.priority, Self.priorityText(request.priority), to: &block)
        if case .device = request.destination {
            writeChanging(.apnsID, request.apnsID, to: &block)
        }
        if let expiration = request.expiration {
            writeChanging(.expiration, String(expiration), to: &block)
        }
        if let collapseID = request.collapseID {
            writeChanging(.collapseID, collapseID, to: &block)
        }
    }

    /// A value that repeats: its index when the table has it, else a literal added to the table.
    private mutating func writeRepeating(_ field: Field, _ value: String, to block: inout ByteBuffer) {
        if let last = lastIndexed[field.rawValue], last.number >= added - entries.count, last.value == value {
            block.writeHPACKInteger(index(of: last.number), prefixBits: 7, flags: 0b1000_0000)
            return
        }
        let key = Key(field: field, value: value)
        if let number = numbers[key] {
            block.writeHPACKInteger(index(of: number), prefixBits: 7, flags: 0b1000_0000)
            lastIndexed[field.rawValue] = (value, number)
            return
        }
        writeAdded(key, to: &block)
    }

    /// A value that changes on every request: a literal without indexing whose name refers to
    /// the table, after a first one that puts the name there.
    private mutating func writeChanging(_ field: Field, _ value: String, to block: inout ByteBuffer) {
        guard let number = newestWithName[field.rawValue] else {
            writeAdded(Key(field: field, value: value), to: &block)
            return
        }
        block.writeHPACKInteger(index(of: number), prefixBits: 4, flags: 0)
        block.writeHPACKString(value)
    }

    /// A literal with incremental indexing (RFC 7541 section 6.2.1), and its entry in the table.
    private mutating func writeAdded(_ key: Key, to block: inout ByteBuffer) {
        if let nameIndex = key.field.staticNameIndex ?? newestWithName[key.field.rawValue].map(index(of:)) {
            block.writeHPACKInteger(nameIndex, prefixBits: 6, flags: 0b0100_0000)
        } else {
            block.writeHPACKInteger(0, prefixBits: 6, flags: 0b0100_0000)
            block.writeHPACKString(key.field.name)
        }
        block.writeHPACKString(key.value)
        let size = key.field.name.utf8.count + key.value.utf8.count + 32
        evict(toFit: size)
        // An entry larger than the whole table empties it and is not added (section 4.4).
        guard size <= tableCapacity else { return }
        entries.append((key, size))
        numbers[key] = added
        newestWithName[key.field.rawValue] = added
        added += 1
        tableSize += size
    }

    /// Evicts the oldest entries until `size` more fits (or the table is empty).
    private mutating func evict(toFit size: Int) {
        while tableSize + size > tableCapacity, let oldest = entries.popFirst() {
            let number = added - entries.count - 1
            tableSize -= oldest.size
            numbers[oldest.key] = nil  // a field and value are in the table at most once
            if newestWithName[oldest.key.field.rawValue] == number { newestWithName[oldest.key.field.rawValue] = nil }
        }
    }

    /// The HPACK index of the entry added as the `number`-th: the newest is 62 (section 2.3.3).
    private func index(of number: Int) -> Int {
        62 + added - 1 - number
    }

    /// A literal without indexing with a literal name.
    private static func writeUnindexed(name: String, _ value: String, to block: inout ByteBuffer) {
        block.writeHPACKInteger(0, prefixBits: 4, flags: 0)
        block.writeHPACKString(name)
        block.writeHPACKString(value)
    }

    private static func priorityText(_ priority: APNSPriority) -> String {
        switch priority {
        case .immediate: "10"
        case .conserveEnergy: "5"
        case .prioritizePower: "1"
        }
    }
}
