"""Who may ask the controller what (issue 16; docs/security.md, "ACLs").

Sans-IO: the node's transport authenticates the connection and hands the
principal over with the request payload; this decides. Registration is
bound to the certificate (a broker's certificate registers only its own
id, KIP-631's broker id is the one the certificate names); topic changes
and unregistering a broker are administration; describes are reads.
"""

from __future__ import annotations

from quorum import AccessControlList, Operation, Principal, PrincipalKind

from ._requests import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    RegisterBrokerRequest,
    RegisterControllerRequest,
    UnregisterBrokerRequest,
    decode_message,
)


def refuse_controller_request(principal: Principal, payload: bytes, acl: AccessControlList) -> str | None:
    """Why ``principal`` may not send this controller request; None when
    it may. A payload that does not decode is let through: the controller
    answers it with INVALID_REQUEST and acts on nothing."""
    try:
        request = decode_message(payload)
    except ValueError:
        return None
    if isinstance(request, RegisterBrokerRequest):
        if principal.kind is PrincipalKind.BROKER and principal.member_id == request.broker_id:
            return None
        return f"{principal} may not register broker {request.broker_id}: only pykraft://broker/{request.broker_id} may"
    if isinstance(request, RegisterControllerRequest):
        # KIP-919: only the controller's own node certificate registers it.
        if principal.kind is PrincipalKind.NODE and principal.member_id == request.controller_id:
            return None
        return (
            f"{principal} may not register controller {request.controller_id}: "
            f"only pykraft://node/{request.controller_id} may"
        )
    if isinstance(request, (UnregisterBrokerRequest, CreateTopicsRequest, DeleteTopicsRequest)):
        operation = Operation.ADMIN
    else:
        operation = Operation.READ
    if acl.allows(principal, operation):
        return None
    return f"{principal} may not {operation.value} ({type(request).__name__})"
