#include "grpc_gateway/reflection_service.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

namespace kvrelay::gateway {

namespace {

namespace reflection = grpc::reflection::v1;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// `file`, then every file it imports, directly or not, each once.
void add_file_and_imports(const FileDescriptor* file, std::set<const FileDescriptor*>& added,
                          reflection::FileDescriptorResponse& out) {
  if (!added.insert(file).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out.add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) add_file_and_imports(file->dependency(i), added, out);
}

void set_error(grpc::StatusCode code, const std::string& message, reflection::ServerReflectionResponse& response) {
  auto* error = response.mutable_error_response();
  error->set_error_code(code);
  error->set_error_message(message);
}

// The file and its imports, or NOT_FOUND naming what was asked for.
void set_file_or_not_found(const FileDescriptor* file, const std::string& missing,
                           reflection::ServerReflectionResponse& response) {
  if (file == nullptr) return set_error(grpc::StatusCode::NOT_FOUND, missing, response);
  std::set<const FileDescriptor*> added;
  add_file_and_imports(file, added, *response.mutable_file_descriptor_response());
}

}  // namespace

reflection::ServerReflectionResponse ReflectionService::answer(
    const reflection::ServerReflectionRequest& request) const {
  const DescriptorPool& pool = *DescriptorPool::generated_pool();
  reflection::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  switch (request.message_request_case()) {
    case reflection::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_)
        response.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case reflection::ServerReflectionRequest::kFileByFilename:
      set_file_or_not_found(pool.FindFileByName(request.file_by_filename()),
                            "file not found: " + request.file_by_filename(), response);
      break;
    case reflection::ServerReflectionRequest::kFileContainingSymbol:
      set_file_or_not_found(pool.FindFileContainingSymbol(request.file_containing_symbol()),
                            "symbol not found: " + request.file_containing_symbol(), response);
      break;
    case reflection::ServerReflectionRequest::kFileContainingExtension: {
      const auto& wanted = request.file_containing_extension();
      const auto* type = pool.FindMessageTypeByName(wanted.containing_type());
      const auto* extension = type == nullptr ? nullptr : pool.FindExtensionByNumber(type, wanted.extension_number());
      set_file_or_not_found(
          extension == nullptr ? nullptr : extension->file(),
          "extension not found: " + wanted.containing_type() + " " + std::to_string(wanted.extension_number()),
          response);
      break;
    }
    case reflection::ServerReflectionRequest::kAllExtensionNumbersOfType:
      if (const auto* type = pool.FindMessageTypeByName(request.all_extension_numbers_of_type())) {
        std::vector<const google::protobuf::FieldDescriptor*> extensions;
        pool.FindAllExtensions(type, &extensions);
        auto* numbers = response.mutable_all_extension_numbers_response();
        numbers->set_base_type_name(type->full_name());
        for (const auto* extension : extensions) numbers->add_extension_number(extension->number());
      } else {
        set_error(grpc::StatusCode::NOT_FOUND, "type not found: " + request.all_extension_numbers_of_type(), response);
      }
      break;
    case reflection::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      set_error(grpc::StatusCode::UNIMPLEMENTED, "the request names nothing to reflect", response);
      break;
  }
  return response;
}

grpc::Status ReflectionService::ServerReflectionInfo(
    grpc::ServerContext* /*context*/,
    grpc::ServerReaderWriter<reflection::ServerReflectionResponse, reflection::ServerReflectionRequest>* stream) {
  reflection::ServerReflectionRequest request;
  while (stream->Read(&request)) {
    if (!stream->Write(answer(request))) break;
  }
  return grpc::Status::OK;
}

}  // namespace kvrelay::gateway
