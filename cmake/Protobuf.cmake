# Generates C++ message code (protoc) and gRPC service code (grpc_cpp_plugin) for the
# schemas under proto/. Outputs land in the build tree, mirroring the proto paths.
find_program(KVRELAY_PROTOC protoc REQUIRED)
find_program(KVRELAY_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# kvrelay_generate_proto(<messages-out-var> <services-out-var> <proto root> <proto relative to root> ...)
function(kvrelay_generate_proto messages_var services_var proto_root)
  set(out_root "${PROJECT_BINARY_DIR}/generated")
  set(messages)
  set(services)
  # Every schema given, not only the one compiled: a schema's generated code changes with
  # those it imports (ingest.proto imports relay.proto).
  list(TRANSFORM ARGN PREPEND "${proto_root}/" OUTPUT_VARIABLE all_protos)
  foreach(rel IN LISTS ARGN)
    string(REGEX REPLACE "\\.proto$" "" stem "${rel}")
    set(msg_cc "${out_root}/${stem}.pb.cc")
    set(msg_h "${out_root}/${stem}.pb.h")
    set(svc_cc "${out_root}/${stem}.grpc.pb.cc")
    set(svc_h "${out_root}/${stem}.grpc.pb.h")
    add_custom_command(
      OUTPUT "${msg_cc}" "${msg_h}" "${svc_cc}" "${svc_h}"
      COMMAND ${CMAKE_COMMAND} -E make_directory "${out_root}"
      COMMAND ${KVRELAY_PROTOC} -I "${proto_root}"
              --cpp_out "${out_root}" --grpc_out "${out_root}"
              --plugin=protoc-gen-grpc=${KVRELAY_GRPC_CPP_PLUGIN}
              "${proto_root}/${rel}"
      DEPENDS ${all_protos}
      COMMENT "protoc ${rel}"
      VERBATIM)
    list(APPEND messages "${msg_cc}")
    list(APPEND services "${svc_cc}")
  endforeach()
  set(${messages_var} ${messages} PARENT_SCOPE)
  set(${services_var} ${services} PARENT_SCOPE)
endfunction()
