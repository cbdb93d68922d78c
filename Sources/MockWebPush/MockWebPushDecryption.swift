import Crypto
import Foundation

/// Decrypts a push message as the browser does before its service worker sees it: RFC 8291's
/// key derivation over RFC 8188's `aes128gcm`. A real push service cannot decrypt; the mock does,
/// so tests see what the service worker would. Written step by step from the RFCs with HMAC
/// (HKDF by hand), sharing no code with the sender's WebPushEncryption it checks.
enum MockWebPushDecryption {
    /// RFC 8188 §2.1: salt (16) || rs (4, big-endian) || idlen (1) || keyid (idlen).
    static let saltLength = 16
    /// RFC 8291 §4: the keyid is the application server's public key, an uncompressed point.
    static let senderKeyLength = 65
    static let tagLength = 16

    /// The plaintext of `body` for the subscription whose key pair is `privateKey` and whose
    /// authentication secret is `auth`; nil when anything is wrong.
    static func decrypt(_ body: [UInt8], privateKey: P256.KeyAgreement.PrivateKey, auth: [UInt8]) -> [UInt8]? {
        let headerLength = saltLength + 4 + 1
        guard body.count >= headerLength else { return nil }
        let salt = Array(body[0..<saltLength])
        let recordSize = body[saltLength..<saltLength + 4].reduce(0) { ($0 << 8) | Int($1) }
        let idLength = Int(body[saltLength + 4])
        guard idLength == senderKeyLength, body.count >= headerLength + idLength else { return nil }
        let senderPublic = Array(body[headerLength..<headerLength + idLength])
        let record = Array(body[(headerLength + idLength)...])
        // RFC 8188 §2: rs is at least 18; RFC 8291 §4: one record only, so it fits in rs. The
        // record holds at least the tag and the padding delimiter.
        guard recordSize >= 18, record.count <= recordSize, record.count >= tagLength + 1 else { return nil }
        guard let senderKey = try? P256.KeyAgreement.PublicKey(x963Representation: senderPublic),
            let shared = try? privateKey.sharedSecretFromKeyAgreement(with: senderKey)
        else { return nil }
        let ecdhSecret = shared.withUnsafeBytes { Array($0) }
        let receiverPublic = Array(privateKey.publicKey.x963Representation)

        // RFC 8291 §3.4: PRK_key = HMAC-SHA-256(auth_secret, ecdh_secret);
        // key_info = "WebPush: info" || 0x00 || ua_public || as_public;
        // IKM = HMAC-SHA-256(PRK_key, key_info || 0x01) (32 bytes: one block).
        let keyPRK = hmac(key: auth, ecdhSecret)
        let inputKey = hmac(key: keyPRK, Array("WebPush: info".utf8) + [0] + receiverPublic + senderPublic + [1])
        // RFC 8188 §2.2 and §2.3: PRK = HMAC-SHA-256(salt, IKM);
        // CEK = first 16 bytes of HMAC-SHA-256(PRK, "Content-Encoding: aes128gcm" || 0x00 || 0x01);
        // NONCE = first 12 bytes of HMAC-SHA-256(PRK, "Content-Encoding: nonce" || 0x00 || 0x01),
        // XOR the record's sequence number, 0 for the only record.
        let prk = hmac(key: salt, inputKey)
        let contentKey = Array(hmac(key: prk, Array("Content-Encoding: aes128gcm".utf8) + [0, 1]).prefix(16))
        let nonce = Array(hmac(key: prk, Array("Content-Encoding: nonce".utf8) + [0, 1]).prefix(12))

        guard
            let box = try? AES.GCM.SealedBox(
                nonce: AES.GCM.Nonce(data: nonce), ciphertext: Array(record.dropLast(tagLength)), tag: Array(record.suffix(tagLength))),
            let opened = try? AES.GCM.open(box, using: SymmetricKey(data: contentKey))
        else { return nil }
        // RFC 8188 §2: the data, then a delimiter (2 for the last record), then any zeros.
        let padded = Array(opened)
        guard let delimiter = padded.lastIndex(where: { $0 != 0 }), padded[delimiter] == 2 else { return nil }
        return Array(padded[..<delimiter])
    }

    private static func hmac(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key)).withUnsafeBytes { Array($0) }
    }
}
